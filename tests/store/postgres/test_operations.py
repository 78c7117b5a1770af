"""Operation records on PostgreSQL under real concurrency: two stores (separate pools, as two
processes would have) racing to claim and finish one identity, and a fenced owner's finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

import zincir
from tests.runtime_conformance import make_invocation
from zincir import FencedOut
from zincir.contract import Record, Success, encode_record
from zincir.durable._operations import new_operation, stored_outcome
from zincir.store import NewOperation, OperationOutcome, Store

TTL = timedelta(seconds=30)


@pytest.fixture
async def stores(postgres_url: str) -> AsyncIterator[tuple[Store, Store]]:
    first, second = zincir.open_store(postgres_url), zincir.open_store(postgres_url)
    yield first, second
    await first.close()
    await second.close()


def outcome(run_id: str, output: str, sequence: int = 0) -> OperationOutcome:
    record = Record.for_invocation(make_invocation(run_id, sequence=sequence), Success(output))
    return stored_outcome(record, encode_record(record))


def operation(run_id: str, sequence: int = 0) -> NewOperation:
    return new_operation(make_invocation(run_id, sequence=sequence))


async def completed_events(store: Store, run_id: str) -> list[zincir.store.Event]:
    return [e for e in await store.list_events(run_id) if e.type == "operation_completed"]


async def test_racing_claims_of_one_identity_have_one_winner(stores: tuple[Store, Store]) -> None:
    """Sixteen claimers of each of ten new identities, across two stores: one claims it, the
    others see the winner's live claim (the outcome SQLite gives a later claimer)."""
    for sequence in range(10):
        op = operation("run-claims", sequence)
        claims = await asyncio.gather(
            *(
                stores[n % 2].claim_operation(op, owner=f"w{n}/1", ttl=TTL, owner_prefix=f"w{n}/")
                for n in range(16)
            )
        )
        won = [claim for claim in claims if claim.claimed]
        assert len(won) == 1
        winner = won[0].row.claim_owner
        assert won[0].row.attempts == 1
        assert all(c.row.claim_owner == winner and c.row.status == "claimed" for c in claims)
        row = await stores[1].get_operation(op.key)
        assert row is not None and (row.claim_owner, row.attempts) == (winner, 1)


async def test_racing_takeovers_of_an_expired_claim_have_one_winner(
    stores: tuple[Store, Store],
) -> None:
    """An expired claim taken over by many at once: one takeover, counted once."""
    op = operation("run-expired")
    assert (await stores[0].claim_operation(op, owner="old/1", ttl=timedelta(0))).claimed
    claims = await asyncio.gather(
        *(
            stores[n % 2].claim_operation(op, owner=f"w{n}/1", ttl=TTL, owner_prefix=f"w{n}/")
            for n in range(16)
        )
    )
    assert sum(claim.claimed for claim in claims) == 1
    row = await stores[0].get_operation(op.key)
    assert row is not None and row.attempts == 2


async def test_racing_finishes_store_one_record(stores: tuple[Store, Store]) -> None:
    """Finishes racing on a new identity without a lease: one record is stored and every
    other finisher gets that record back."""
    for sequence in range(10):
        op = operation("run-finish", sequence)
        answers = await asyncio.gather(
            *(
                stores[n % 2].finish_operation(
                    op, outcome("run-finish", f'"{n}"', sequence), owner=f"w{n}/1"
                )
                for n in range(8)
            )
        )
        assert answers.count(None) == 1
        row = await stores[0].get_operation(op.key)
        assert row is not None and row.status == "completed"
        assert all(answer == row for answer in answers if answer is not None)


async def test_racing_finishes_under_one_lease_log_one_event(
    stores: tuple[Store, Store],
) -> None:
    lease = await stores[0].create_run("run-logged", name="logged", owner="me", ttl=TTL)
    op = operation("run-logged")
    assert (await stores[0].claim_operation(op, owner="a/1", ttl=TTL, lease=lease)).claimed
    answers = await asyncio.gather(
        *(
            stores[n % 2].finish_operation(
                op, outcome("run-logged", f'"{n}"'), owner="a/1", lease=lease
            )
            for n in range(8)
        )
    )
    assert answers.count(None) == 1
    [event] = await completed_events(stores[1], "run-logged")
    assert event.payload["attempts"] == 1


async def test_a_fenced_owners_finish_is_refused_and_stores_nothing(
    stores: tuple[Store, Store],
) -> None:
    old = await stores[0].create_run("run-fenced", name="fenced", owner="old", ttl=TTL)
    op = operation("run-fenced")
    assert (await stores[0].claim_operation(op, owner="a/1", ttl=TTL, lease=old)).claimed
    new = await stores[1].acquire_run("run-fenced", owner="new", ttl=TTL, force=True)
    before = await stores[1].list_events("run-fenced")
    with pytest.raises(FencedOut):
        await stores[0].finish_operation(op, outcome("run-fenced", '"old"'), owner="a/1", lease=old)
    with pytest.raises(FencedOut):
        await stores[0].save_operation_record(op, outcome("run-fenced", '"old"'), lease=old)
    assert await stores[1].list_events("run-fenced") == before
    row = await stores[1].get_operation(op.key)
    assert row is not None and row.status == "claimed" and row.claim_fenced
    # the same refusal on a new identity leaves no row at all
    fresh = operation("run-fenced", 1)
    with pytest.raises(FencedOut):
        await stores[0].finish_operation(
            fresh, outcome("run-fenced", '"old"', 1), owner="a/1", lease=old
        )
    with pytest.raises(FencedOut):
        await stores[0].claim_operation(fresh, owner="a/1", ttl=TTL, lease=old)
    assert await stores[1].get_operation(fresh.key) is None
    taken = await stores[1].claim_operation(op, owner="b/1", ttl=TTL, lease=new)
    assert taken.claimed and taken.row.attempts == 2


async def test_a_finish_racing_a_takeover_is_all_or_nothing(stores: tuple[Store, Store]) -> None:
    """The old owner's finishes race a forced takeover: each identity is either completed
    with its event in the log, or refused with no record and no event."""
    old = await stores[0].create_run("run-race", name="race", owner="old", ttl=TTL)
    ops = [operation("run-race", sequence) for sequence in range(20)]

    async def finish(op: NewOperation) -> bool:
        try:
            stored = await stores[0].finish_operation(
                op, outcome("run-race", '"x"', op.key.sequence), owner="a/1", lease=old
            )
        except FencedOut:
            return False
        assert stored is None
        return True

    async def take_over() -> None:
        await asyncio.sleep(0.005)
        await stores[1].acquire_run("run-race", owner="new", ttl=TTL, force=True)

    results = await asyncio.gather(*(finish(op) for op in ops), take_over())
    finished = {op.key.sequence for op, done in zip(ops, results, strict=False) if done}
    logged = {e.payload["sequence"] for e in await completed_events(stores[1], "run-race")}
    assert logged == finished
    for op in ops:
        row = await stores[1].get_operation(op.key)
        assert (row is not None) == (op.key.sequence in finished)


async def test_renew_and_count_under_a_lost_lease_change_nothing(
    stores: tuple[Store, Store],
) -> None:
    old = await stores[0].create_run("run-renew", name="renew", owner="old", ttl=TTL)
    op = operation("run-renew")
    claim = await stores[0].claim_operation(op, owner="a/1", ttl=TTL, lease=old)
    await stores[1].acquire_run("run-renew", owner="new", ttl=TTL, force=True)
    assert not await stores[0].renew_operation_claim(op.key, owner="a/1", ttl=TTL, lease=old)
    with pytest.raises(FencedOut):
        await stores[0].count_operation_attempt(op.key, owner="a/1", ttl=TTL, lease=old)
    row = await stores[1].get_operation(op.key)
    assert row is not None and row.attempts == 1
    assert row.claim_expires_at == claim.row.claim_expires_at
