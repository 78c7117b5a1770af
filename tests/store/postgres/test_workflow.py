"""Workflow operations on PostgreSQL under real concurrency: stores with their own pools (as
separate processes would have) race step claims against a takeover, receives of one topic,
sends against receives, timers, keyed sends and spawns on one schema; timers are judged by
the database clock, pinned here to the test's clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.conftest import START
from zincir import FencedOut, StepInProgress
from zincir.store import Lease, ReceivedMessage, StepClaim
from zincir.store.postgres import PostgresStore
from zincir.testing import FakeClock

TTL = timedelta(seconds=30)
Pair = tuple[PostgresStore, PostgresStore]


@pytest.fixture
async def pair(postgres_url: str, clock: FakeClock) -> AsyncIterator[Pair]:
    """Two stores on one schema, one pinned clock (the database's ``zincir_now()``)."""
    first = PostgresStore(postgres_url, clock=clock, pool_size=6)
    second = PostgresStore(postgres_url, clock=clock, pool_size=6)
    yield first, second
    await first.close()
    await second.close()


def rows(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """A query on a connection of its own, outside the stores."""
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(query, params))


async def types(store: PostgresStore, run_id: str) -> list[str]:
    return [event.type for event in await store.list_events(run_id)]


async def _outcomes(*calls: Awaitable[object]) -> list[object]:
    """What each call returned or raised."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


# -- steps -------------------------------------------------------------------------------


async def test_a_fenced_owner_racing_a_takeover_stores_nothing(
    pair: Pair, postgres_url: str
) -> None:
    """An owner claims and finishes steps while another store takes the run over: each of
    its writes either committed before the takeover or stored nothing (FencedOut), and the
    new owner recovers exactly the claims it left running."""
    first, second = pair
    old = await first.create_run("r", name="r", owner="old", ttl=TTL)
    names = [f"s{n:02}" for n in range(40)]
    done: dict[str, str] = {}  # name -> how far the old owner got

    async def old_owner(name: str) -> None:
        try:
            claim = await first.claim_step(old, name)
            assert claim == StepClaim("claimed")
            done[name] = "claimed"
            await first.finish_step(old, name, json.dumps(name))
            done[name] = "finished"
        except FencedOut:
            pass

    async def takeover() -> Lease:
        await asyncio.sleep(0.01)
        return await second.acquire_run("r", owner="new", ttl=TTL, force=True)

    *_, new = await asyncio.gather(*(old_owner(name) for name in names), takeover())
    assert isinstance(new, Lease) and new.token == 2
    stored = {
        name: (status, token, result)
        for name, status, token, result in rows(
            postgres_url, "SELECT name, status, claim_token, result FROM steps"
        )
    }
    assert set(stored) == set(done)  # a fenced claim left no row
    for name, reached in done.items():
        status, token, result = stored[name]
        assert token == 1
        expected = ("completed", json.dumps(name)) if reached == "finished" else ("running", None)
        assert (status, result) == expected
    completed = sorted(name for name, reached in done.items() if reached == "finished")
    assert (await types(second, "r")).count("step_completed") == len(completed)
    # The new owner: the old claims still running are released, then its own run once.
    left = sorted(name for name, reached in done.items() if reached == "claimed")
    assert await second.recover_steps(new) == left
    outcomes = await _outcomes(
        *(first.claim_step(old, name) for name in names),
        *(second.claim_step(new, name) for name in names),
    )
    olds, news = outcomes[: len(names)], outcomes[len(names) :]
    for name, theirs, ours in zip(names, olds, news, strict=True):
        if name in completed:
            assert ours == theirs == StepClaim("completed", name)
        else:
            assert ours == StepClaim("claimed")
            assert isinstance(theirs, FencedOut) or theirs == StepClaim("held", None, "new", 2)
    finishes = await _outcomes(
        *(first.finish_step(old, name, "1") for name in names),
        *(second.finish_step(new, name, '"new"') for name in names if name not in completed),
    )
    assert all(isinstance(outcome, FencedOut) for outcome in finishes[: len(names)])
    assert all(isinstance(outcome, int) for outcome in finishes[len(names) :])
    assert rows(postgres_url, "SELECT count(*) FROM steps WHERE status = 'running'") == [(0,)]
    assert rows(postgres_url, "SELECT count(*) FROM steps WHERE result = '1'") == [(0,)]


async def test_one_owners_steps_from_two_stores(pair: Pair) -> None:
    """Steps of one owner claimed and finished from two stores at once: each is claimed
    once, the log stays gapless, and a recovered claim's late result is refused."""
    first, second = pair
    lease = await first.create_run("r", name="r", owner="o", ttl=TTL)
    names = [f"s{n:02}" for n in range(30)]
    claims = await asyncio.gather(
        *((first, second)[n % 2].claim_step(lease, name) for n, name in enumerate(names))
    )
    assert claims == [StepClaim("claimed")] * len(names)
    seqs = await asyncio.gather(
        *(
            (second, first)[n % 2].finish_step(lease, name, str(n))
            for n, name in enumerate(names)
            if n % 3
        )
    )
    events = await first.list_events("r")
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert sorted(seqs) == [event.seq for event in events if event.type == "step_completed"]
    stale = [name for n, name in enumerate(names) if not n % 3]
    assert await second.recover_steps(lease) == stale
    with pytest.raises(StepInProgress):
        await first.finish_step(lease, stale[0], "0")


# -- messages ----------------------------------------------------------------------------


async def test_receivers_of_one_topic_take_each_message_once(pair: Pair, postgres_url: str) -> None:
    """Receives with distinct keys from two stores at once take distinct messages, the
    oldest first; receives replaying one key return one message, received once."""
    first, second = pair
    lease = await first.create_run("rx", name="rx", owner="o", ttl=TTL)
    ids = [await second.send_message("rx", "t", json.dumps(n)) for n in range(12)]
    attempts = await asyncio.gather(
        *((first, second)[n % 2].receive_attempt(lease, "t", f"k{n}", None) for n in range(16))
    )
    taken = [a.value for a in attempts if a.done]
    assert all(isinstance(message, ReceivedMessage) for message in taken)
    assert sorted(message.id for message in taken if message) == ids
    assert [a.done for a in attempts].count(False) == 4
    received = rows(postgres_url, "SELECT count(*) FROM messages WHERE received_by IS NOT NULL")
    assert received == [(12,)]
    assert (await types(first, "rx")).count("message_received") == 12
    # One key replayed from both stores at once: the same message, taken once.
    extra = await first.send_message("rx", "t", '"extra"')
    again = await asyncio.gather(
        *((first, second)[n % 2].receive_attempt(lease, "t", "one", None) for n in range(8))
    )
    assert {a.value.id for a in again if a.value} == {extra}
    assert all(a.done for a in again)
    assert (await types(first, "rx")).count("message_received") == 13


async def test_a_message_sent_during_a_receive_is_never_lost(pair: Pair) -> None:
    """A send racing a receive: the receive takes it, or records its wait, and then the
    readiness probe sees the message and the next attempt takes it."""
    first, second = pair
    lease = await first.create_run("rx", name="rx", owner="o", ttl=TTL)
    missed = 0
    for n in range(40):
        sent, attempt = await asyncio.gather(
            second.send_message("rx", "t", json.dumps(n)),
            first.receive_attempt(lease, "t", f"k{n}", None),
        )
        if not attempt.done:
            missed += 1
            run = await second.get_run("rx")
            assert run is not None and (run["wait_kind"], run["wait_ref"]) == ("message", "t")
            assert await second.message_ready("rx", "t")
            attempt = await first.receive_attempt(lease, "t", f"k{n}", None)
        assert attempt.done and attempt.value is not None
        assert (attempt.value.id, attempt.value.payload) == (sent, n)
        assert not await second.message_ready("rx", "t")
    run = await first.get_run("rx")
    assert run is not None and run["wait_kind"] is None
    assert (await types(first, "rx")).count("message_received") == 40


async def test_keyed_sends_racing_store_one_message(pair: Pair, postgres_url: str) -> None:
    """The same keyed send from outside a run, and from a run, many times at once: one
    message each (one ``message_sent``), every caller given its id."""
    first, second = pair
    lease = await first.create_run("tx", name="tx", owner="o", ttl=TTL)
    await first.create_run("rx", name="rx", owner="o", ttl=TTL)
    external = await asyncio.gather(
        *((first, second)[n % 2].send_message("rx", "t", '"x"', key="k") for n in range(10))
    )
    internal = await asyncio.gather(
        *(
            (first, second)[n % 2].send_from_run(lease, "rx", "t", '"y"', send_key="k")
            for n in range(10)
        )
    )
    assert len(set(external)) == len(set(internal)) == 1 and external[0] != internal[0]
    assert rows(postgres_url, "SELECT count(*) FROM messages") == [(2,)]
    assert (await types(first, "tx")).count("message_sent") == 1


async def test_a_fenced_sender_and_receiver_store_nothing(pair: Pair, postgres_url: str) -> None:
    """After a takeover the old lease's sends and receives are refused with nothing stored,
    while a replay of what it did before still answers."""
    first, second = pair
    old = await first.create_run("r", name="r", owner="old", ttl=TTL)
    await first.send_message("r", "t", "1")
    await first.send_message("r", "t", "2")
    sent = await first.send_from_run(old, "r", "self", "0", send_key="before")
    before = await first.receive_attempt(old, "t", "before", None)
    new = await second.acquire_run("r", owner="new", ttl=TTL, force=True)
    assert await first.send_from_run(old, "r", "self", "0", send_key="before") == sent
    assert await first.receive_attempt(old, "t", "before", None) == before
    outcomes = await _outcomes(
        first.send_from_run(old, "r", "self", "0", send_key="after"),
        first.receive_attempt(old, "t", "after", None),
        first.receive_attempt(old, "t", "late", timedelta(seconds=5)),
        second.receive_attempt(new, "t", "new", None),
    )
    assert all(isinstance(outcome, FencedOut) for outcome in outcomes[:3])
    assert rows(postgres_url, "SELECT received_by FROM messages ORDER BY id") == [
        ("before",),
        ("new",),
        (None,),
    ]
    assert rows(postgres_url, "SELECT count(*) FROM timers") == [(0,)]


# -- timers ------------------------------------------------------------------------------


async def test_timers_are_set_and_judged_by_the_database_clock(
    pair: Pair, clock: FakeClock, postgres_url: str
) -> None:
    """The wake time is the pinned database clock plus the duration; the timer fires at
    that instant, not a microsecond before, once however many attempts race it."""
    first, second = pair
    lease = await first.create_run("r", name="r", owner="o", ttl=TTL)
    clock.advance(0.5)
    wake = START + timedelta(seconds=10.5)
    attempts = await asyncio.gather(
        *(
            (first, second)[n % 2].sleep_attempt(lease, "nap", timedelta(seconds=10))
            for n in range(8)
        )
    )
    assert {(a.done, a.deadline) for a in attempts} == {(False, wake)}
    timer = await second.get_timer("r", "nap")
    assert timer is not None and (timer.wake_at, timer.completed_at) == (wake, None)
    run = await second.get_run("r")
    assert run is not None and (run["wait_kind"], run["wait_ref"]) == ("timer", "nap")
    clock.advance(9.999999)
    assert not (await first.sleep_attempt(lease, "nap", timedelta(seconds=1))).done
    clock.advance(0.000001)
    fired = await asyncio.gather(
        *((first, second)[n % 2].sleep_attempt(lease, "nap", timedelta(0)) for n in range(8))
    )
    assert {(a.done, a.deadline) for a in fired} == {(True, wake)}
    timer = await first.get_timer("r", "nap")
    assert timer is not None and timer.completed_at == wake
    assert await types(first, "r") == ["state_transition", "timer_set", "timer_completed"]
    run = await second.get_run("r")
    assert run is not None and run["wait_kind"] is None
    assert rows(postgres_url, "SELECT created_at FROM timers") == [
        (START + timedelta(seconds=0.5),)
    ]


async def test_a_receive_deadline_is_the_database_clock(pair: Pair, clock: FakeClock) -> None:
    """A receive's deadline is stored at its first attempt and times out once, at the
    pinned database time; a message arriving later is left for the next receive."""
    first, second = pair
    lease = await first.create_run("r", name="r", owner="o", ttl=TTL)
    deadline = START + timedelta(seconds=5)
    waiting = await first.receive_attempt(lease, "t", "k", timedelta(seconds=5))
    assert (waiting.done, waiting.deadline) == (False, deadline)
    run = await second.get_run("r")
    assert run is not None and (run["wait_kind"], run["wait_until"]) == (
        "message",
        "2030-01-01T00:00:05.000000Z",
    )
    clock.advance(5)
    timed_out = await asyncio.gather(
        *((first, second)[n % 2].receive_attempt(lease, "t", "k", timedelta(1)) for n in range(6))
    )
    assert {(a.done, a.value, a.deadline) for a in timed_out} == {(True, None, deadline)}
    assert (await types(first, "r")).count("recv_timed_out") == 1
    await second.send_message("r", "t", "1")
    assert await first.replayed_receive("r", "k") == timed_out[0]
    taken = await second.receive_attempt(lease, "t", "k2", None)
    assert taken.done and taken.value is not None and taken.value.payload == 1


# -- child runs --------------------------------------------------------------------------


async def test_racing_spawns_create_one_child_and_joins_see_it_finish(
    pair: Pair, postgres_url: str
) -> None:
    """One spawn name from two stores at once, with different child ids: one child, one
    ``child_spawned``, every caller given its id; joins racing its end all see it."""
    first, second = pair
    lease = await first.create_run("p", name="p", owner="o", ttl=TTL)
    ids = await asyncio.gather(
        *(
            (first, second)[n % 2].spawn_child(lease, "kid", child_id=f"c{n}", run_name="kid")
            for n in range(10)
        )
    )
    assert len(set(ids)) == 1
    child_id = ids[0]
    assert rows(postgres_url, "SELECT id FROM agent_runs WHERE parent_id = 'p'") == [(child_id,)]
    assert (await types(first, "p")).count("child_spawned") == 1
    waiting = await second.join_attempt(lease, child_id)
    assert not waiting.done and (await first.child_outcome("p", child_id)).awaited
    child = await second.acquire_run(child_id, owner="w", ttl=TTL)
    finishing = second.finish_run(child, "completed", result_json='{"ok": true}')
    _, joins = await asyncio.gather(
        finishing, asyncio.gather(*(first.join_attempt(lease, child_id) for _ in range(5)))
    )
    assert {(j.done, j.value.status) for j in joins} <= {(False, "running"), (True, "completed")}
    final = await first.join_attempt(lease, child_id)
    assert final.done and final.value.ok and final.value.result == {"ok": True}
    outcome = await second.child_outcome("p", child_id)
    assert outcome.child == final.value and not outcome.awaited
