"""The store's rate-limit rules on every backend: slots reserved one after another (also
when taken at once), a block for everyone that empties the buckets, the token count
corrected from usage, and a waiting run's recorded wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from zincir import AgentContext
from zincir.store import Store
from zincir.store._rate_limits import BucketRates
from zincir.store._stall import stall_reason

REQUESTS = BucketRates(
    requests_per_second=2.0, requests_burst=2.0, tokens_per_second=None, tokens_burst=1.0
)
TOKENS = BucketRates(
    requests_per_second=None, requests_burst=1.0, tokens_per_second=100.0, tokens_burst=100.0
)
TOLERANCE = 0.1  # seconds of the test's own work between two takes


async def test_requests_take_the_slots_in_turn(store: Store) -> None:
    waits = [await store.take_rate_limit("k", REQUESTS, 0) for _ in range(5)]
    assert waits[:2] == [0.0, 0.0]  # the bucket's burst
    for earlier, later in zip(waits[1:], waits[2:], strict=False):
        assert later - earlier == pytest.approx(0.5, abs=TOLERANCE)


async def test_slots_taken_at_once_are_distinct(store: Store) -> None:
    waits = sorted(
        await asyncio.gather(*(store.take_rate_limit("k", REQUESTS, 0) for _ in range(8)))
    )
    assert waits[:2] == [0.0, 0.0]
    for earlier, later in zip(waits[1:], waits[2:], strict=False):
        assert later - earlier == pytest.approx(0.5, abs=TOLERANCE)
    other = await store.take_rate_limit("other", REQUESTS, 0)
    assert other == 0.0  # keys are apart


async def test_a_block_holds_everyone_then_resumes_at_the_pace(store: Store) -> None:
    until = await store.block_rate_limit("k", REQUESTS, 3.0)
    assert until > datetime.now(UTC)
    first = await store.take_rate_limit("k", REQUESTS, 0)
    second = await store.take_rate_limit("k", REQUESTS, 0)
    assert first == pytest.approx(3.5, abs=TOLERANCE)  # empty at the block's end
    assert second - first == pytest.approx(0.5, abs=TOLERANCE)
    # A shorter block does not cut a longer one short.
    assert await store.block_rate_limit("k", REQUESTS, 1.0) == until


async def test_usage_corrects_the_token_estimate(store: Store) -> None:
    assert await store.take_rate_limit("k", TOKENS, 50) == 0.0
    await store.settle_rate_limit("k", 100.0, 250)  # it used 300 tokens, not 50
    wait = await store.take_rate_limit("k", TOKENS, 50)
    assert wait == pytest.approx(2.5, abs=TOLERANCE)
    # A request above the bucket waits for a full bucket, then takes all it needs.
    assert await store.take_rate_limit("big", TOKENS, 1000) == 0.0
    assert await store.take_rate_limit("big", TOKENS, 10) == pytest.approx(9.1, abs=TOLERANCE)


async def test_a_waiting_run_records_its_wait(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="waiting")
    try:
        await store.take_rate_limit("k", REQUESTS, 0, "waiting")
        await store.take_rate_limit("k", REQUESTS, 0, "waiting")
        assert (await store.get_run("waiting"))["wait_kind"] is None  # type: ignore[index]
        wait = await store.take_rate_limit("k", REQUESTS, 0, "waiting")
        assert wait > 0
        run = await store.get_run("waiting")
        assert run is not None and run["wait_ref"] == "rate_limit:k"
        reason = stall_reason(run, datetime.now(UTC))
        assert reason is not None and reason.kind == "rate_limit"
        assert reason.text.startswith(f"waiting for rate limit k until {run['wait_until']}")
        # Checked again after the wait, with no block meanwhile: nothing more is taken.
        assert await store.take_rate_limit("k", REQUESTS, 0, "waiting", again=True) == 0.0
        run = await store.get_run("waiting")
        assert run is not None and run["wait_kind"] is None
    finally:
        await ctx.close()
