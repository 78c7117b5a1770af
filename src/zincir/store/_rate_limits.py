"""Provider rate limits shared through the store: one row per key (``rate_limits``).

Each key keeps two token buckets (requests, tokens) as the time each is next full of its
budget (its theoretical arrival time). A request reserves its slot in one write transaction
(PostgreSQL: the row locked), pushing each bucket's time on by its cost; it may start once
every bucket it uses holds its cost (or is full, for a cost above the bucket), and not
before ``blocked_until``, which a provider's 429 with ``Retry-After`` sets for everyone.
Times are the store's clock (``zincir_now()``: on PostgreSQL the server's). A request that
must wait records it on its run's row (``wait_kind`` 'timer', ``wait_ref``
``rate_limit:KEY``) for ``runs list --stuck``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from ._sql import Rules, Tx, sql
from ._timers import clear_wait

__all__ = [
    "RATE_LIMIT_REF",
    "BucketRates",
    "RateLimitOps",
    "block_rate_limit",
    "settle_rate_limit",
    "take_rate_limit",
]

RATE_LIMIT_REF: Final = "rate_limit:"
"""The prefix of ``wait_ref`` of a run waiting for a rate limit (its key follows)."""

_ENSURE: Final = sql(
    "INSERT INTO rate_limits (key, updated_at) VALUES (?, zincir_now()) "
    "ON CONFLICT (key) DO NOTHING"
)
_READ: Final = sql(
    "SELECT requests_at, tokens_at, blocked_until, zincir_now() FROM rate_limits "
    "WHERE key = ?{for_update}"
)
_WRITE: Final = sql(
    "UPDATE rate_limits SET requests_at = ?, tokens_at = ?, blocked_until = ?, "
    "updated_at = zincir_now() WHERE key = ?"
)
_SET_WAIT: Final = sql(
    "UPDATE agent_runs SET wait_kind = 'timer', wait_ref = ?, wait_until = ? "
    "WHERE id = ? AND status = 'running' AND (wait_kind IS NULL OR wait_ref = ?)"
)


@dataclass(frozen=True, slots=True)
class BucketRates:
    """A key's limits as each bucket's refill rate (per second) and size; None: no limit."""

    requests_per_second: float | None
    requests_burst: float
    tokens_per_second: float | None
    tokens_burst: float


def _start(
    full_at: datetime | None, now: datetime, rate: float, burst: float, cost: float
) -> datetime:
    """When a bucket full at ``full_at`` holds ``cost`` (all of it, for a cost above it)."""
    if full_at is None or full_at <= now:
        return now
    return full_at - timedelta(seconds=(burst - min(cost, burst)) / rate)


def _pushed(full_at: datetime | None, start: datetime, rate: float, cost: float) -> datetime:
    base = start if full_at is None or full_at < start else full_at
    return base + timedelta(seconds=cost / rate)


def take_rate_limit(
    tx: Tx,
    key: str,
    rates: BucketRates,
    tokens: float,
    run_id: str | None,
    *,
    again: bool = False,
) -> float:
    """Reserve one request of ``tokens`` estimated tokens on ``key``: the seconds to wait
    before sending it (0: now). ``again`` (after waiting): take nothing unless the key was
    blocked meanwhile. A wait is recorded on run ``run_id``'s row; none left, it is cleared.
    """
    tx.execute(_ENSURE, (key,))
    row = tx.one(_READ, (key,))
    assert row is not None, "the rate limit's row was just ensured"
    requests_at = None if row[0] is None else tx.time(row[0])
    tokens_at = None if row[1] is None else tx.time(row[1])
    blocked = None if row[2] is None else tx.time(row[2])
    now = tx.time(row[3])
    ref = RATE_LIMIT_REF + key
    if again and (blocked is None or blocked <= now):
        if run_id is not None:
            clear_wait(tx, run_id, "timer", ref)
        return 0.0
    start = now if blocked is None or blocked <= now else blocked
    if rates.requests_per_second is not None:
        start = max(
            start, _start(requests_at, now, rates.requests_per_second, rates.requests_burst, 1)
        )
    if rates.tokens_per_second is not None:
        start = max(
            start, _start(tokens_at, now, rates.tokens_per_second, rates.tokens_burst, tokens)
        )
    if rates.requests_per_second is not None:
        requests_at = _pushed(requests_at, start, rates.requests_per_second, 1)
    if rates.tokens_per_second is not None:
        tokens_at = _pushed(tokens_at, start, rates.tokens_per_second, tokens)
    tx.execute(_WRITE, (tx.stamp(requests_at), tx.stamp(tokens_at), tx.stamp(blocked), key))
    wait = (start - now).total_seconds()
    if run_id is not None:
        if wait > 0:
            tx.execute(_SET_WAIT, (ref, tx.stamp(start), run_id, ref))
        elif again:
            clear_wait(tx, run_id, "timer", ref)
    return wait


def settle_rate_limit(tx: Tx, key: str, tokens_per_second: float, extra: float) -> None:
    """Count ``extra`` tokens more (fewer, when negative) than a request reserved on ``key``."""
    row = tx.one(_READ, (key,))
    if row is None or row[1] is None:
        return
    tokens_at = tx.time(row[1]) + timedelta(seconds=extra / tokens_per_second)
    requests_at = row[0] if row[0] is None else tx.time(row[0])
    blocked = None if row[2] is None else tx.time(row[2])
    tx.execute(_WRITE, (tx.stamp(requests_at), tx.stamp(tokens_at), tx.stamp(blocked), key))


def _emptied(
    full_at: datetime | None, until: datetime, rate: float | None, burst: float
) -> datetime | None:
    """A bucket's full time once it is empty at ``until`` (or later, as it was)."""
    if rate is None:
        return full_at
    empty = until + timedelta(seconds=burst / rate)
    return empty if full_at is None or full_at < empty else full_at


def block_rate_limit(tx: Tx, key: str, rates: BucketRates, seconds: float) -> datetime:
    """Let no request on ``key`` start for ``seconds`` from now (a later block stays), and
    empty its buckets then: requests resume at the limit's pace, not in a burst. The time
    it is blocked until."""
    tx.execute(_ENSURE, (key,))
    row = tx.one(_READ, (key,))
    assert row is not None, "the rate limit's row was just ensured"
    until = tx.time(row[3]) + timedelta(seconds=seconds)
    if row[2] is not None and tx.time(row[2]) > until:
        until = tx.time(row[2])
    requests_at = None if row[0] is None else tx.time(row[0])
    tokens_at = None if row[1] is None else tx.time(row[1])
    requests_at = _emptied(requests_at, until, rates.requests_per_second, rates.requests_burst)
    tokens_at = _emptied(tokens_at, until, rates.tokens_per_second, rates.tokens_burst)
    tx.execute(_WRITE, (tx.stamp(requests_at), tx.stamp(tokens_at), tx.stamp(until), key))
    return until


class RateLimitOps(Rules):
    """Provider rate limits shared by key."""

    async def take_rate_limit(
        self,
        key: str,
        rates: BucketRates,
        tokens: float,
        run_id: str | None = None,
        *,
        again: bool = False,
    ) -> float:
        """Reserve one request of ``tokens`` estimated tokens on rate limit ``key``: the
        seconds to wait before sending it; ``again`` re-checks after the wait (a block)."""
        return await self._write_tx(
            lambda tx: take_rate_limit(tx, key, rates, tokens, run_id, again=again),
            durable=False,
        )

    async def settle_rate_limit(self, key: str, tokens_per_second: float, extra: float) -> None:
        """Count ``extra`` tokens more than a request on ``key`` reserved (from its usage)."""
        await self._write_tx(
            lambda tx: settle_rate_limit(tx, key, tokens_per_second, extra), durable=False
        )

    async def block_rate_limit(self, key: str, rates: BucketRates, seconds: float) -> datetime:
        """Block rate limit ``key`` for everyone for ``seconds`` (a provider's Retry-After)."""
        return await self._write_tx(lambda tx: block_rate_limit(tx, key, rates, seconds))
