"""Workflow steps replayed against the run's log by new code: divergence caught before
anything runs, reordering and removal tolerated, gathered steps judged by call, never by
completion order."""

from __future__ import annotations

import asyncio
import pickle
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import zincir
from zincir import AgentContext, WorkflowContext
from zincir.store import NewEvent, Store


class Effects:
    """Step bodies that count how often each really ran."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()

    def __call__(self, name: str) -> Callable[[], Any]:
        def body() -> str:
            self.ran[name] += 1
            return name.upper()

        return body


async def run_steps(store: Store, run_id: str, names: list[str], effects: Effects) -> list[Any]:
    """One process's pass: open (or take over) the run and ask for ``names`` in order."""
    async with await WorkflowContext.open(store, run_id) as wf:
        return [await wf.step(name, effects(name)) for name in names]


async def step_events(store: Store, run_id: str) -> list[str]:
    events = await store.list_events(run_id)
    return [event.payload["name"] for event in events if event.type == "step_completed"]


def test_version_divergence_carries_its_fields_and_pickles() -> None:
    error = zincir.VersionDivergence(
        run_id="run-1", position=1, recorded="step 'price'", attempted="step 'quote'"
    )
    assert isinstance(error, zincir.ZincirError)
    assert "run-1" in str(error) and "step 'price'" in str(error) and "step 'quote'" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is zincir.VersionDivergence and str(again) == str(error)
    assert (again.run_id, again.position, again.recorded, again.attempted) == (
        "run-1",
        1,
        "step 'price'",
        "step 'quote'",
    )


async def test_a_renamed_step_raises_before_anything_is_claimed(store: Store) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price"], effects)
    async with await WorkflowContext.open(store, "r") as wf:
        assert await wf.step("fetch", effects("fetch")) == "FETCH"
        with pytest.raises(zincir.VersionDivergence) as raised:
            await wf.step("quote", effects("quote"))
        assert await wf.unreplayed() == ["step 'price'"]
    error = raised.value
    assert (error.run_id, error.position, error.recorded, error.attempted) == (
        "r",
        1,
        "step 'price'",
        "step 'quote'",
    )
    assert effects.ran == Counter(fetch=1, price=1)
    # Nothing was claimed: the old code still finishes the run, and quote never ran.
    assert await run_steps(store, "r", ["fetch", "price", "notify"], effects) == [
        "FETCH",
        "PRICE",
        "NOTIFY",
    ]
    assert effects.ran == Counter(fetch=1, price=1, notify=1)
    assert await step_events(store, "r") == ["fetch", "price", "notify"]


async def test_a_step_added_in_the_middle_raises(store: Store) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price"], effects)
    with pytest.raises(zincir.VersionDivergence) as raised:
        await run_steps(store, "r", ["fetch", "audit", "price"], effects)
    assert (raised.value.position, raised.value.recorded, raised.value.attempted) == (
        1,
        "step 'price'",
        "step 'audit'",
    )
    assert effects.ran == Counter(fetch=1, price=1)


async def test_a_new_first_step_raises_at_position_zero(store: Store) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch"], effects)
    with pytest.raises(zincir.VersionDivergence) as raised:
        await run_steps(store, "r", ["login", "fetch"], effects)
    assert (raised.value.position, raised.value.recorded) == (0, "step 'fetch'")
    assert effects.ran == Counter(fetch=1)


async def test_reordered_steps_replay_and_new_steps_follow(store: Store) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price"], effects)
    names = ["price", "fetch", "notify", "archive"]
    assert await run_steps(store, "r", names, effects) == [name.upper() for name in names]
    assert effects.ran == Counter(fetch=1, price=1, notify=1, archive=1)


async def test_a_removed_step_is_reported_and_not_fatal(store: Store) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price", "notify"], effects)
    async with await WorkflowContext.open(store, "r") as wf:
        assert await wf.step("fetch", effects("fetch")) == "FETCH"
        assert await wf.step("notify", effects("notify")) == "NOTIFY"
        assert await wf.unreplayed() == ["step 'price'"]
        await wf.complete()
    assert effects.ran == Counter(fetch=1, price=1, notify=1)


async def test_a_removed_step_followed_by_new_work_raises(store: Store) -> None:
    """Skipping price and asking for archive cannot be told from renaming price."""
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price"], effects)
    with pytest.raises(zincir.VersionDivergence) as raised:
        await run_steps(store, "r", ["fetch", "archive"], effects)
    assert (raised.value.recorded, raised.value.attempted) == ("step 'price'", "step 'archive'")


async def test_a_long_log_is_read_a_page_at_a_time(store: Store) -> None:
    effects = Effects()
    async with await WorkflowContext.open(store, "r") as wf:
        note = NewEvent("note", '{"n": 1}')
        await store.append_events(wf.agent.lease, [note] * 4500)
        await wf.step("fetch", effects("fetch"))
        await store.append_events(wf.agent.lease, [note] * 10)
        await wf.step("price", effects("price"))
    with pytest.raises(zincir.VersionDivergence) as raised:
        await run_steps(store, "r", ["fetch", "quote"], effects)
    assert raised.value.recorded == "step 'price'"


async def test_a_first_lease_reads_no_log_and_checks_nothing(store: Store) -> None:
    async with await WorkflowContext.open(store, "r") as wf:
        assert wf.agent.replay.settled
        assert await wf.step("a", lambda: 1) == 1
        assert await wf.unreplayed() == []


async def test_a_context_from_a_recovered_agent_reads_the_log_at_its_first_step(
    store: Store,
) -> None:
    effects = Effects()
    await run_steps(store, "r", ["fetch", "price"], effects)
    ctx = await AgentContext.recover(store, "r")
    wf = WorkflowContext.from_agent(ctx)
    try:
        assert not ctx.replay.settled
        with pytest.raises(zincir.VersionDivergence):
            await wf.step("quote", effects("quote"))
        assert await wf.step("price", effects("price")) == "PRICE"
        assert await wf.unreplayed() == ["step 'fetch'"]
    finally:
        await wf.close()
    assert effects.ran == Counter(fetch=1, price=1)


# -- gathered steps ---------------------------------------------------------------------


async def test_a_gather_cut_short_replays_whatever_finished_first(store: Store) -> None:
    """s1 and s3 finished, s2 did not: asked in call order s1, s2, s3, the unrecorded s2 is
    judged once s3 has been asked for too, so it runs as new work."""
    effects = Effects()
    never = asyncio.Event()

    async def hangs() -> str:
        await never.wait()
        return "never"

    async with await WorkflowContext.open(store, "r") as wf:
        first = asyncio.ensure_future(
            asyncio.gather(
                wf.step("s1", effects("s1")), wf.step("s2", hangs), wf.step("s3", effects("s3"))
            )
        )
        while len(await step_events(store, "r")) < 2:
            await asyncio.sleep(0.005)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    async with await WorkflowContext.open(store, "r") as wf:
        results = await asyncio.gather(
            *(wf.step(name, effects(name)) for name in ("s1", "s2", "s3"))
        )
    assert results == ["S1", "S2", "S3"]
    assert effects.ran == Counter(s1=1, s2=1, s3=1)


async def test_a_branch_waits_for_its_siblings_replays_before_judging(store: Store) -> None:
    """a (never recorded) is asked for beside branch b1 → sleep → b2, all recorded: it is
    judged only once that branch, replaying its step and then its sleep, has asked for b2,
    so it runs as new work."""
    effects = Effects()
    never = asyncio.Event()

    async def hangs() -> str:
        await never.wait()
        return "never"

    async def branch(wf: WorkflowContext) -> list[Any]:
        one = await wf.step("b1", effects("b1"))
        await wf.sleep("pause", 0)
        return [one, await wf.step("b2", effects("b2"))]

    async with await WorkflowContext.open(store, "r") as wf:
        first = asyncio.ensure_future(asyncio.gather(wf.step("a", hangs), branch(wf)))
        while len(await step_events(store, "r")) < 2:
            await asyncio.sleep(0.005)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first

    async with await WorkflowContext.open(store, "r") as wf:
        await wf.recover()
        assert await asyncio.gather(wf.step("a", effects("a")), branch(wf)) == [
            "A",
            ["B1", "B2"],
        ]
    assert effects.ran == Counter(a=1, b1=1, b2=1)


async def test_a_new_step_in_a_gather_still_diverges(store: Store) -> None:
    effects = Effects()
    async with await WorkflowContext.open(store, "r") as wf:
        await asyncio.gather(wf.step("s1", effects("s1")), wf.step("s2", effects("s2")))
    async with await WorkflowContext.open(store, "r") as wf:
        with pytest.raises(zincir.VersionDivergence) as raised:
            await asyncio.gather(wf.step("s1", effects("s1")), wf.step("x", effects("x")))
    assert (raised.value.recorded, raised.value.attempted) == ("step 's2'", "step 'x'")
    assert effects.ran == Counter(s1=1, s2=1)


STEPS = ["s1", "s2", "s3", "s4", "s5", "s6"]


async def gathered(wf: WorkflowContext, body: Callable[[str], Callable[[], Any]]) -> list[Any]:
    """s1 and s2, beside branch s3 → s4, beside branch s5 → a sleep → s6."""

    async def left() -> list[Any]:
        return [await wf.step("s3", body("s3")), await wf.step("s4", body("s4"))]

    async def right() -> list[Any]:
        five = await wf.step("s5", body("s5"))
        await wf.sleep("pause", 0)
        return [five, await wf.step("s6", body("s6"))]

    one, two, (three, four), (five, six) = await asyncio.gather(
        wf.step("s1", body("s1")), wf.step("s2", body("s2")), left(), right()
    )
    return [one, two, three, four, five, six]


class Trial:
    """One run of :func:`gathered`: bodies sleep a random while, and those finishing after
    the first ``cut`` of them never return (their process died before the effect)."""

    def __init__(self, run_id: str, rng: random.Random) -> None:
        self.run_id = run_id
        self.rng = rng
        self.ran: Counter[str] = Counter()
        self.finished: list[str] = []
        self.never = asyncio.Event()

    def body(self, name: str, cut: int | None) -> Callable[[], Any]:
        async def run() -> str:
            await asyncio.sleep(self.rng.random() * 0.002)
            if cut is not None and len(self.finished) >= cut:
                await self.never.wait()
            self.finished.append(name)
            self.ran[name] += 1
            return f"{self.run_id}:{name}"

        return run

    async def first(self, store: Store, cut: int) -> tuple[str, ...]:
        """The first process: ``cut`` steps finish and are stored, then it dies."""
        async with await WorkflowContext.open(store, self.run_id) as wf:
            work = asyncio.ensure_future(gathered(wf, lambda name: self.body(name, cut)))
            while len(await step_events(store, self.run_id)) < cut:
                await asyncio.sleep(0.001)
            if cut == len(STEPS):
                await work
            else:
                work.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await work
        return tuple(self.finished)

    async def resumed(self, store: Store) -> list[Any]:
        async with await WorkflowContext.open(store, self.run_id) as wf:
            await wf.recover()  # a claim the cancel caught mid-write (the first one is dead)
            results = await gathered(wf, lambda name: self.body(name, None))
            assert await wf.unreplayed() == []
        return results


async def test_a_thousand_shuffled_completion_orders_replay_identically(store: Store) -> None:
    """Each trial: the first process finishes a random number of the gathered steps, in a
    random order, and dies; the next replays them in another random order and finishes the
    rest. Every step runs once, and the results are the same whatever the order."""
    rng = random.Random(20)
    orders: set[tuple[str, ...]] = set()
    for number in range(1000):
        trial = Trial(f"gather-{number}", rng)
        orders.add(await trial.first(store, rng.randint(0, len(STEPS))))
        results = await trial.resumed(store)
        assert results == [f"{trial.run_id}:{name}" for name in STEPS], number
        assert trial.ran == Counter(STEPS), (number, trial.finished)
    assert len(orders) > 100  # the completion orders really were shuffled
