"""Runs, leases and the agent log on PostgreSQL under real concurrency: stores with their
own pools (as separate processes would have) race takeovers, appends, tool results and
checkpoint decisions on one schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta

import pytest

from tests.conftest import START
from zincir import CheckpointError, DuplicateToolCall, FencedOut, LeaseHeld
from zincir.store import Lease, NewEvent
from zincir.store.postgres import PostgresStore
from zincir.testing import FakeClock

TTL = timedelta(seconds=30)


@pytest.fixture
async def pair(
    postgres_url: str, clock: FakeClock
) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one schema, one pinned clock (so a lease expires when the test says)."""
    first = PostgresStore(postgres_url, clock=clock, pool_size=4)
    second = PostgresStore(postgres_url, clock=clock, pool_size=4)
    yield first, second
    await first.close()
    await second.close()


def _event(**payload: object) -> NewEvent:
    return NewEvent("note", json.dumps(payload))


async def _outcomes(*calls: Awaitable[object]) -> list[object]:
    """What each call returned or raised."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_one_takeover_wins(
    pair: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    """Racers on two stores take over the same expired run, round after round: exactly one
    wins each round, the others see its live lease, and the tokens strictly increase."""
    first, second = pair
    await first.create_run("r", name="r", owner="creator", ttl=TTL)
    tokens = [1]
    for round_no in range(15):
        clock.advance(TTL.total_seconds() + 1)
        outcomes = await _outcomes(
            *(
                (first, second)[n % 2].acquire_run("r", owner=f"o{round_no}.{n}", ttl=TTL)
                for n in range(6)
            )
        )
        won = [lease for lease in outcomes if isinstance(lease, Lease)]
        assert len(won) == 1, outcomes
        assert all(isinstance(o, LeaseHeld) for o in outcomes if o is not won[0])
        assert won[0].token > tokens[-1]
        tokens.append(won[0].token)
        run = await second.get_run("r")
        assert run is not None and (run["lease_owner"], run["lease_token"]) == (
            won[0].owner,
            won[0].token,
        )
    assert tokens == list(range(1, 17))


async def test_one_open_run_creates(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """Processes opening the same new run at once: one creates it (token 1), the rest find
    its live lease; the log holds one first transition."""
    first, second = pair
    outcomes = await _outcomes(
        *((first, second)[n % 2].open_run("w", name="w", owner=f"o{n}", ttl=TTL) for n in range(8))
    )
    won = [lease for lease in outcomes if isinstance(lease, Lease)]
    assert len(won) == 1 and won[0].token == 1, outcomes
    assert sum(isinstance(o, LeaseHeld) for o in outcomes) == 7
    assert [e.type for e in await first.list_events("w")] == ["state_transition"]


async def test_appends_stay_gapless(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """Many tasks on two stores append batches under one lease: the seqs are 1..N without
    gaps or repeats, each batch contiguous, and each call returns its batch's last seq."""
    first, second = pair
    lease = await first.create_run("a", name="a", owner="me", ttl=TTL)
    lasts = await asyncio.gather(
        *(
            (first, second)[n % 2].append_events(lease, [_event(n=n, i=i) for i in range(3)])
            for n in range(60)
        )
    )
    events = await first.list_events("a")
    assert [e.seq for e in events] == list(range(1, 182))
    assert sorted(lasts) == list(range(4, 182, 3))
    for last in lasts:
        batch = events[last - 3 : last]
        assert len({e.payload["n"] for e in batch}) == 1
        assert [e.payload["i"] for e in batch] == [0, 1, 2]
    run = await second.get_run("a")
    assert run is not None and run["last_seq"] == 181


async def test_a_fenced_append_stores_nothing(
    pair: tuple[PostgresStore, PostgresStore], clock: FakeClock
) -> None:
    """After another store took the run over, the old owner's appends, renewals and finish
    are refused and store nothing."""
    first, second = pair
    old = await first.create_run("f", name="f", owner="old", ttl=TTL)
    await first.append_events(old, [_event(by="old")])
    clock.advance(TTL.total_seconds() + 1)
    new = await second.acquire_run("f", owner="new", ttl=TTL)
    assert new.token == 2
    with pytest.raises(FencedOut, match="superseded by 2"):
        await first.append_events(old, [_event(by="old", late=True)])
    with pytest.raises(FencedOut):
        await first.finish_run(old, "completed")
    assert await first.renew_lease(old) is False
    assert await first.release_lease(old) is False
    events = await second.list_events("f")
    assert [e.seq for e in events] == [1, 2] and events[-1].payload == {"by": "old"}
    run = await second.get_run("f")
    assert run is not None and run["status"] == "running" and run["lease_owner"] == "new"


async def test_appends_racing_a_takeover(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """The old owner keeps appending while another store forces a takeover: every append
    the old owner saw succeed is stored, every refused one is not, and none lands after the
    new owner's first event."""
    first, second = pair
    old = await first.create_run("t", name="t", owner="old", ttl=TTL)
    stored: list[int] = []
    refused: list[int] = []

    async def old_owner() -> None:
        for n in range(10_000):
            try:
                await first.append_events(old, [_event(by="old", n=n)])
            except FencedOut:
                refused.append(n)
                if len(refused) == 5:
                    return
            else:
                stored.append(n)

    async def new_owner() -> None:
        await asyncio.sleep(0.05)
        new = await second.acquire_run("t", owner="new", ttl=TTL, force=True)
        await second.append_events(new, [_event(by="new")])

    await asyncio.gather(old_owner(), new_owner())
    assert refused and stored, "the takeover should land mid-way"
    events = (await first.list_events("t"))[1:]
    bys = [e.payload["by"] for e in events]
    assert bys == ["old"] * len(stored) + ["new"]
    assert [e.payload["n"] for e in events[:-1]] == stored
    assert min(refused) > max(stored)


async def test_one_tool_result_wins(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """Two stores record the result of the same intent at once: one stores it, the rest
    get DuplicateToolCall, and the intent is closed once."""
    first, second = pair
    lease = await first.create_run("c", name="c", owner="me", ttl=TTL)
    await first.record_response(lease, '"r"', [("call", '{"tool":"t"}')])
    assert await second.open_intents("c") == [{"tool": "t"}]
    outcomes = await _outcomes(
        *((first, second)[n % 2].record_tool_result(lease, "call", f'"{n}"') for n in range(6))
    )
    assert sum(isinstance(o, int) for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, DuplicateToolCall) for o in outcomes) == 5
    assert await first.open_intents("c") == []
    types = [e.type for e in await second.list_events("c")]
    assert types == ["state_transition", "llm_call", "tool_call", "tool_result"]


async def test_one_intent_per_call_id(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """Responses racing with the same tool call id: one intent is stored; the others raise
    DuplicateToolCall and leave no llm_call behind."""
    first, second = pair
    lease = await first.create_run("i", name="i", owner="me", ttl=TTL)
    outcomes = await _outcomes(
        *(
            (first, second)[n % 2].record_response(lease, f'"r{n}"', [("same", '{"n":1}')])
            for n in range(6)
        )
    )
    assert sum(isinstance(o, int) for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, DuplicateToolCall) for o in outcomes) == 5
    types = [e.type for e in await first.list_events("i")]
    assert types == ["state_transition", "llm_call", "tool_call"]
    assert await second.open_intents("i") == [{"n": 1}]


async def test_checkpoint_races(pair: tuple[PostgresStore, PostgresStore]) -> None:
    """Racing proposals get distinct consecutive rounds; racing decisions on one proposal
    store exactly one verdict."""
    first, second = pair
    lease = await first.create_run("k", name="k", owner="me", ttl=TTL)
    proposed = await asyncio.gather(
        *(
            (first, second)[n % 2].propose_checkpoint(lease, {"n": n}, json.dumps({"n": n}))
            for n in range(8)
        )
    )
    assert sorted(p.round for p in proposed) == list(range(1, 9))
    latest = max(proposed, key=lambda p: p.round)
    assert await second.proposed_checkpoint("k") == latest
    outcomes = await _outcomes(
        *(
            (first, second)[n % 2].decide_checkpoint(lease, latest, n % 2 == 0, {"n": n})
            for n in range(6)
        )
    )
    decided = [o for o in outcomes if isinstance(o, int)]
    assert len(decided) == 1 and sum(isinstance(o, CheckpointError) for o in outcomes) == 5
    state = await second.load_state("k")
    if state.checkpoint is None:  # the winner rejected it
        assert state.events[-1].type == "checkpoint_rejected"
    else:
        assert state.checkpoint.round == 8 and state.checkpoint.decided_seq == decided[0]
        assert state.checkpoint.decided_at == START
        assert state.events == []
