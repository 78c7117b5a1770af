"""Claims on PostgreSQL under real concurrency: worker stores with their own pools (as
separate processes would have) claim disjoint runs, fail a spent run once, and a settled
attempt never undoes a newer claim."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from tests.conftest import START
from zincir.store import Lease
from zincir.store.postgres import PostgresStore
from zincir.testing import FakeClock

TTL = timedelta(seconds=30)
BACKOFF = timedelta(seconds=60)


def backoff(attempt: int) -> timedelta:
    return BACKOFF * attempt


@pytest.fixture
async def workers(postgres_url: str, clock: FakeClock) -> AsyncIterator[list[PostgresStore]]:
    """Eight stores on one schema sharing one pinned clock."""
    stores = [PostgresStore(postgres_url, clock=clock, pool_size=3) for _ in range(8)]
    yield stores
    for store in stores:
        await store.close()


async def _abandoned(store: PostgresStore, count: int, prefix: str = "run") -> list[str]:
    """``count`` runs whose owners released them: claimable at once."""
    ids = [f"{prefix}{n:03}" for n in range(count)]
    for run_id in ids:
        lease = await store.create_run(run_id, name="n", owner="gone", ttl=TTL)
        assert await store.release_lease(lease)
    return ids


async def _drain(
    stores: list[PostgresStore], *, max_attempts: int | None = None, rounds: int | None = None
) -> list[Lease]:
    """Two claiming loops per store, each claiming up to 7 runs at a time until it gets
    none (or for ``rounds`` calls); every lease any of them got."""
    got: list[Lease] = []

    async def loop(store: PostgresStore, name: str) -> None:
        calls = 0
        while rounds is None or calls < rounds:
            calls += 1
            leases = await store.claim_runs(
                name, TTL, 7, max_attempts=max_attempts, backoff=backoff
            )
            if not leases and rounds is None:
                return
            got.extend(leases)

    await asyncio.gather(
        *(loop(store, f"w{n}.{k}") for n, store in enumerate(stores) for k in range(2))
    )
    return got


async def test_workers_claim_each_run_once(workers: list[PostgresStore]) -> None:
    """Eight stores claim from 200 runnable runs at once: each run is claimed exactly once,
    with token 2 and attempt 1, and its log gets one run_claimed."""
    ids = await _abandoned(workers[0], 200)
    leases = await _drain(workers)
    assert sorted(lease.run_id for lease in leases) == ids
    assert {lease.token for lease in leases} == {2}
    owners = Counter(lease.owner for lease in leases)
    assert len(owners) > 1, "the claims should be spread over the workers"
    for lease in leases[::17]:
        run = await workers[1].get_run(lease.run_id)
        assert run is not None
        assert (run["lease_owner"], run["lease_token"], run["attempts"]) == (lease.owner, 2, 1)
        assert run["next_attempt_at"] == "2030-01-01T00:01:00.000000Z"
        events = await workers[2].list_events(lease.run_id)
        assert [e.type for e in events] == ["state_transition", "run_claimed"]
        assert events[-1].payload == {"worker": lease.owner, "attempt": 1, "lease_token": 2}


async def test_a_spent_run_fails_once(workers: list[PostgresStore], clock: FakeClock) -> None:
    """Runs out of attempts, claimed by eight stores at once, are each failed exactly once
    (one transition to failed, token bumped once) and claimed by nobody."""
    ids = await _abandoned(workers[0], 40)
    assert len(await _drain(workers, max_attempts=1)) == 40
    clock.advance(BACKOFF.total_seconds() + TTL.total_seconds())
    assert await _drain(workers, max_attempts=1, rounds=3) == []
    for run_id in ids:
        run = await workers[3].get_run(run_id)
        assert run is not None and (run["status"], run["lease_token"]) == ("failed", 3)
        events = await workers[4].list_events(run_id)
        assert [e.type for e in events] == ["state_transition", "run_claimed", "state_transition"]
        assert events[-1].payload["to"] == "failed"


async def test_settle_never_undoes_a_new_claim(
    workers: list[PostgresStore], clock: FakeClock
) -> None:
    """An attempt settled while another worker claims the run (its lease expired): either
    the claim lands first and the stale settle changes nothing, or the settle locks the row
    first, records the failure and backs off, and the claim passes the run over."""
    first, second = workers[0], workers[1]
    for round_no in range(12):
        (run_id,) = await _abandoned(first, 1, prefix=f"s{round_no}.")
        (stale,) = await first.claim_runs("old", TTL, 1, max_attempts=None, backoff=backoff)
        assert stale.run_id == run_id
        clock.advance(BACKOFF.total_seconds() * 2)
        _, claimed = await asyncio.gather(
            first.settle_attempt(stale, "boom", max_attempts=None, backoff=backoff),
            second.claim_runs("new", TTL, 1, max_attempts=None, backoff=backoff),
        )
        run = await first.get_run(run_id)
        assert run is not None
        types = [e.type for e in await first.list_events(run_id)]
        if claimed:
            assert [lease.run_id for lease in claimed] == [run_id]
            assert (run["lease_owner"], run["lease_token"], run["last_error"]) == ("new", 3, None)
            assert types.count("run_claimed") == 2 and "attempt_failed" not in types
            await second.finish_run(claimed[0], "completed")
        else:
            assert (run["lease_token"], run["last_error"]) == (2, "boom")
            assert types.count("run_claimed") == 1 and types[-1] == "attempt_failed"
            closer = await first.acquire_run(run_id, owner="closer", ttl=TTL)
            await first.finish_run(closer, "completed")
        assert await second.run_is_finished(run_id)


async def test_settled_error_backs_off(workers: list[PostgresStore], clock: FakeClock) -> None:
    """A failed attempt records its error and the retry time the database computed from
    the pinned clock and the worker's backoff."""
    store = workers[0]
    (run_id,) = await _abandoned(store, 1, prefix="b")
    (lease,) = await store.claim_runs("w", TTL, 1, max_attempts=None, backoff=backoff)
    clock.advance(5)
    await store.settle_attempt(lease, "boom", max_attempts=3, backoff=backoff)
    run = await store.get_run(run_id)
    assert run is not None
    assert (run["last_error"], run["next_attempt_at"]) == ("boom", "2030-01-01T00:01:05.000000Z")
    (event,) = (await store.list_events(run_id))[-1:]
    assert event.type == "attempt_failed"
    assert event.payload == {
        "attempt": 1,
        "error": "boom",
        "retry_at": "2030-01-01T00:01:05.000000Z",
    }
    assert event.created_at == START + timedelta(seconds=5)
    assert not await store.run_is_finished(run_id)
