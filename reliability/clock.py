"""Clock jumps: durable timers and lease fencing under a clock that leaps an hour either way.

Every store here reads an injected clock (``open_store(path, clock=...)``) built on
``zincir.testing.FakeClock``, over a real SQLite file.

- **Timers through a ResumeWorker.** Runs sleep on durable timers (``suspend_waits``, so
  the worker is also their timer worker) while the clock jumps ±1 h and moves on; the
  worker is polled between moves. No timer may complete before its stored wake time by
  the clock that completed it, no run may be dispatched while its timer is not due, and
  each timer fires once, with the code after it run once.
- **Sleeping in place.** A workflow sleeps in its own process with a sleeper that jumps the
  clock ±1 h while it waits: it must return no earlier than the wake time, once.
- **Fencing.** Several stores on one file, each with its own clock offset that jumps ±1 h,
  claim a run, write to it and renew, in random order. A model of the run's row (owner,
  token, expiry) says what each operation must do: a claim is granted exactly when the
  lease has expired by the claimer's clock, a write or a renewal succeeds exactly when it
  comes from the current token, whatever any clock says.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import zincir
from reliability._harness import Report, at_least, equal
from reliability._procs import query
from zincir import AgentContext, ResumeWorker, WorkflowContext
from zincir.store import Lease, NewEvent, Store
from zincir.testing import FakeClock

ORDER = 7
TITLE = "Clock jumps: timers and fencing under a clock that leaps ±1 h"

HOUR = 3600.0
TIMER_RUNS = {True: 12, False: 120}
TIMER_MOVES = {True: 60, False: 600}
SLEEPS = {True: 40, False: 400}
FENCE_ROUNDS = {True: 25, False: 400}
FENCE_MOVES = 40
FENCE_ACTORS = 4
LEASE_TTL = timedelta(seconds=60)
NOTE = "clock_note"


def run(short: bool) -> Report:
    """The three parts, on one temporary folder of SQLite files."""
    report = Report("clock", TITLE, short=short)
    with tempfile.TemporaryDirectory(prefix="zincir-clock-") as folder:
        for part in (
            asyncio.run(timers_through_a_worker(Path(folder) / "timers.db", short)),
            asyncio.run(sleeping_in_place(Path(folder) / "sleeps.db", short)),
            asyncio.run(fencing(Path(folder) / "fencing.db", short)),
        ):
            report.figures += part.figures
            report.notes += part.notes
    return report


def _jump(chance: random.Random) -> float:
    return HOUR if chance.random() < 0.5 else -HOUR


# -- timers through a ResumeWorker ------------------------------------------------------


async def timers_through_a_worker(db: Path, short: bool) -> Report:
    """Runs sleeping on timers, a worker polled while the clock jumps back and forth."""
    chance = random.Random(7)
    clock = FakeClock()
    store = zincir.open_store(db, clock=clock)
    durations: dict[str, float] = {}
    passes: Counter[str] = Counter()
    bodies: Counter[str] = Counter()
    early_passes = early_dispatches = 0
    jumps = 0

    async def handler(ctx: AgentContext) -> None:
        nonlocal early_passes, early_dispatches
        run_id = ctx.run_id
        stored = await store.get_timer(run_id, "nap")
        if stored is not None and not stored.completed and clock() < stored.wake_at:
            early_dispatches += 1  # claimed although its timer was not due by the clock
        wf = WorkflowContext.from_agent(ctx, suspend_waits=True, sleeper=clock.sleep)
        await wf.sleep("nap", timedelta(seconds=durations[run_id]))
        timer = await store.get_timer(run_id, "nap")
        passes[run_id] += 1
        if timer is None or clock() < timer.wake_at:
            early_passes += 1

        def after_nap() -> dict[str, bool]:
            bodies[run_id] += 1
            return {"woke": True}

        await wf.step("after-nap", after_nap)
        await wf.complete()

    try:
        worker = ResumeWorker(store, lease_ttl=timedelta(minutes=10)).max_concurrency(1000)
        for index in range(TIMER_RUNS[short]):
            run_id = f"timer-{index}"
            durations[run_id] = chance.choice([1.0, 60.0, 1800.0, 3599.0, 3601.0, 7200.0])
            ctx = await AgentContext.create(store, "clock-timers", run_id=run_id)
            await ctx.close()
        for _ in range(TIMER_MOVES[short]):
            move = chance.random()
            if move < 0.3:
                clock.advance(_jump(chance))
                jumps += 1
            elif move < 0.6:
                clock.advance(chance.uniform(0, 900))
            await worker.run_once(handler)
        for _ in range(20):  # the clock finally moves far past every wake time
            clock.advance(3 * HOUR)
            if not await worker.run_once(handler):
                break
        clock.advance(-2 * HOUR)  # and back: nothing may fire again
        await worker.run_once(handler)
    finally:
        await store.close()
    runs = list(durations)
    fired = dict.fromkeys(runs, 0)
    for (run_id,) in query(db, "SELECT run_id FROM events WHERE type = 'timer_completed'"):
        fired[run_id] += 1
    stored_early = query(
        db, "SELECT COUNT(*) FROM timers WHERE completed_at IS NOT NULL AND completed_at < wake_at"
    )[0][0]
    [(completed,)] = query(db, "SELECT COUNT(*) FROM agent_runs WHERE status = 'completed'")
    figures = [
        equal("timers completed before their wake time", stored_early + early_passes, 0),
        equal("runs dispatched while their timer was not due", early_dispatches, 0),
        equal(
            "timers fired more than once",
            sum(n > 1 for n in fired.values()) + sum(n > 1 for n in passes.values()),
            0,
        ),
        equal("code after a timer run more than once", sum(n > 1 for n in bodies.values()), 0),
        equal("timer runs completed", int(completed), len(runs)),
    ]
    notes = [
        f"Timers through a ResumeWorker: {len(runs)} runs sleeping 1 s to 2 h, {jumps} jumps "
        f"of ±1 h among {TIMER_MOVES[short]} clock moves, the worker polled after each; "
        f"{sum(passes.values())} passes past a timer.",
    ]
    return Report("clock", TITLE, figures, notes)


# -- sleeping in place ------------------------------------------------------------------


async def sleeping_in_place(db: Path, short: bool) -> Report:
    """Workflows sleeping in their process while the clock jumps under them."""
    chance = random.Random(11)
    clock = FakeClock()
    store = zincir.open_store(db, clock=clock)
    early = twice = jumps = 0

    try:
        for index in range(SLEEPS[short]):
            jumps_left = chance.randint(0, 3)

            async def jumpy_sleep(seconds: float) -> None:
                nonlocal jumps_left, jumps
                if jumps_left and chance.random() < 0.7:
                    jumps_left -= 1
                    jumps += 1
                    clock.advance(_jump(chance))
                else:
                    clock.advance(seconds)
                await asyncio.sleep(0)

            duration = chance.choice([0.5, 30.0, 1800.0, 3600.0, 5400.0])
            wf = await WorkflowContext.open(store, f"sleep-{index}", sleeper=jumpy_sleep)
            try:
                await wf.sleep("nap", timedelta(seconds=duration))
                timer = await store.get_timer(f"sleep-{index}", "nap")
                early += timer is None or clock() < timer.wake_at
                before = clock()
                await wf.sleep("nap", timedelta(seconds=duration))  # a replay returns at once
                twice += clock() != before
            finally:
                await wf.close()
    finally:
        await store.close()
    fired = query(
        db,
        "SELECT COUNT(*) FROM (SELECT run_id FROM events WHERE type = 'timer_completed' "
        "GROUP BY run_id HAVING COUNT(*) > 1)",
    )[0][0]
    figures = [
        equal("in-place sleeps that returned before their wake time", early, 0),
        equal("in-place sleeps that fired or waited twice", twice + fired, 0),
    ]
    notes = [
        f"Sleeping in place: {SLEEPS[short]} workflows sleeping 0.5 s to 1.5 h through a sleeper "
        f"that jumped the clock ±1 h {jumps} times while they waited.",
    ]
    return Report("clock", TITLE, figures, notes)


# -- fencing ----------------------------------------------------------------------------


@dataclass
class Actor:
    """A process's view: its store, its clock's offset from true time, the lease it holds."""

    name: str
    offset: float = 0.0
    lease: Lease | None = None
    store: Store = field(init=False)


@dataclass
class RunModel:
    """What the run's row must hold: its owner's name, token and lease expiry, and when the
    next claim may come (a claim with no backoff sets it to the claim's time)."""

    owner: str
    token: int
    expiry: datetime
    next_attempt: datetime | None = None


@dataclass
class FenceTally:
    """What the fencing part counted."""

    wrong_grants: int = 0
    wrong_refusals: int = 0
    fenced_writes_accepted: int = 0
    current_writes_refused: int = 0
    token_jumps: int = 0
    takeovers_ahead: int = 0
    refusals_behind: int = 0
    fenced_writes_refused: int = 0
    grants: int = 0
    problems: list[str] = field(default_factory=list)


async def fencing(db: Path, short: bool) -> Report:
    """Claims, writes and renewals from stores whose clocks jump, against a model."""
    chance = random.Random(5)
    truth = FakeClock()
    tally = FenceTally()
    actors: list[Actor] = []
    for index in range(FENCE_ACTORS):
        actor = Actor(f"actor-{index}")
        actor.store = zincir.open_store(db, clock=_offset_clock(truth, actor))
        actors.append(actor)
    try:
        for round_no in range(FENCE_ROUNDS[short]):
            await _fence_round(f"fence-{round_no}", actors, truth, chance, tally)
    finally:
        for actor in actors:
            await actor.store.close()
    late = _late_notes(db)
    figures = [
        equal(
            "claims granted while the lease was live by the claimer's clock", tally.wrong_grants, 0
        ),
        equal(
            "claims refused although claimable by the claimer's clock",
            tally.wrong_refusals,
            0,
        ),
        equal("writes accepted from a fenced owner", tally.fenced_writes_accepted + late, 0),
        equal("writes refused to the current owner", tally.current_writes_refused, 0),
        equal("tokens not one above the last", tally.token_jumps, 0),
        at_least("takeovers by a clock jumped ahead", tally.takeovers_ahead, 1),
        at_least("claims refused to a clock jumped back", tally.refusals_behind, 1),
        at_least("fenced writes refused", tally.fenced_writes_refused, 1),
    ]
    notes = [
        f"Fencing: {FENCE_ROUNDS[short]} runs, {FENCE_ACTORS} stores with clock offsets "
        f"jumping ±1 h, {FENCE_MOVES} random moves each; {tally.grants} grants.",
        *tally.problems[:10],
    ]
    return Report("clock", TITLE, figures, notes)


def _offset_clock(truth: FakeClock, actor: Actor) -> Callable[[], datetime]:
    """The actor's clock: true time plus its current offset."""
    return lambda: truth() + timedelta(seconds=actor.offset)


def _now(truth: FakeClock, actor: Actor) -> datetime:
    return truth() + timedelta(seconds=actor.offset)


def _zero(attempt: int) -> timedelta:
    return timedelta(0)


async def _fence_round(
    run_id: str, actors: list[Actor], truth: FakeClock, chance: random.Random, tally: FenceTally
) -> None:
    """One run: created by one actor, then random jumps, claims, writes and renewals."""
    for actor in actors:
        actor.lease = None
    first = chance.choice(actors)
    first.lease = await first.store.create_run(
        run_id, name="clock-fencing", owner=first.name, ttl=LEASE_TTL
    )
    model = RunModel(first.name, 1, _now(truth, first) + LEASE_TTL)
    for _ in range(FENCE_MOVES):
        actor = chance.choice(actors)
        move = chance.random()
        if move < 0.2:
            actor.offset = max(-2 * HOUR, min(2 * HOUR, actor.offset + _jump(chance)))
        elif move < 0.35:
            truth.advance(chance.uniform(0, 1.5 * LEASE_TTL.total_seconds()))
        elif move < 0.6:
            await _claim(run_id, actor, actors, truth, model, tally)
        elif move < 0.85:
            await _write(actor, truth, model, tally)
        else:
            await _renew(actor, truth, model, tally)
    [holder] = [actor for actor in actors if actor.lease and actor.lease.token == model.token]
    assert holder.lease is not None
    await holder.store.finish_run(holder.lease, "completed")  # out of the next rounds' claims


async def _claim(
    run_id: str,
    actor: Actor,
    actors: list[Actor],
    truth: FakeClock,
    model: RunModel,
    tally: FenceTally,
) -> None:
    """A ResumeWorker-style claim; granted exactly when the lease expired by this clock
    (and the previous claim's time has passed by it: zero backoff)."""
    now = _now(truth, actor)
    expired = model.expiry <= now and (model.next_attempt is None or model.next_attempt <= now)
    leases = await actor.store.claim_runs(
        actor.name, LEASE_TTL, 1, max_attempts=None, backoff=_zero
    )
    if not leases:
        tally.wrong_refusals += expired
        tally.refusals_behind += actor.offset < 0 and not expired
        if expired:
            tally.problems.append(f"{run_id}: {actor.name} refused at {now}, expiry {model.expiry}")
        return
    [lease] = leases
    tally.grants += 1
    if not expired:
        tally.wrong_grants += 1
        tally.problems.append(f"{run_id}: {actor.name} granted at {now}, expiry {model.expiry}")
    truly_live = model.expiry > truth()
    tally.takeovers_ahead += actor.offset > 0 and truly_live
    tally.token_jumps += lease.token != model.token + 1
    model.owner, model.token, model.expiry = actor.name, lease.token, now + LEASE_TTL
    model.next_attempt = now
    actor.lease = lease


async def _write(actor: Actor, truth: FakeClock, model: RunModel, tally: FenceTally) -> None:
    """An event from the actor's lease: stored exactly when its token is the current one."""
    lease = actor.lease
    if lease is None:
        return
    current = lease.token == model.token
    try:
        payload = json.dumps({"token": lease.token, "actor": actor.name})
        await actor.store.append_events(lease, [NewEvent(NOTE, payload)])
    except zincir.FencedOut:
        tally.current_writes_refused += current
        tally.fenced_writes_refused += not current
        return
    tally.fenced_writes_accepted += not current
    if current:
        model.expiry = _now(truth, actor) + LEASE_TTL


async def _renew(actor: Actor, truth: FakeClock, model: RunModel, tally: FenceTally) -> None:
    """A heartbeat renewal: succeeds exactly when the actor's token is the current one."""
    lease = actor.lease
    if lease is None:
        return
    current = lease.token == model.token
    renewed = await actor.store.renew_lease(lease)
    tally.fenced_writes_accepted += renewed and not current
    tally.current_writes_refused += current and not renewed
    if renewed and current:
        model.expiry = _now(truth, actor) + LEASE_TTL


def _late_notes(db: Path) -> int:
    """Notes in the log written under a token older than a claim logged before them."""
    late = 0
    rows = query(db, "SELECT run_id, seq, type, payload FROM events ORDER BY run_id, seq")
    newest: dict[str, int] = {}
    for run_id, _, kind, payload in rows:
        data = json.loads(payload)
        if kind == "run_claimed":
            newest[run_id] = int(data["lease_token"])
        elif kind == NOTE:
            late += int(data["token"]) < newest.get(run_id, 1)
    return late
