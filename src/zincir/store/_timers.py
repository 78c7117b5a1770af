"""Timers and waits: stored wake times, and what a run is blocked on (``agent_runs.wait_*``).

A wait is recorded in the same fenced transaction that found it unsatisfied, so that a
ResumeWorker does not claim the run before it is satisfied, even if its process dies while
waiting. One wait per run: the latest one wins. Wake times are set and judged by the
store's clock in SQL (``zincir_now()``: on PostgreSQL the server's, never a worker's).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final, Literal

from ._records import Lease
from ._sql import Rules, Tx, micros, sql
from ._workflow_records import TimerRecord, WaitAttempt, timer_record
from ._workflow_rules import timer_fired, timer_set

__all__ = [
    "TimerOps",
    "WaitKind",
    "clear_wait",
    "ensure_timer",
    "fire_timer",
    "read_timer",
    "set_wait",
]

WaitKind = Literal["timer", "message", "child"]

_SET_WAIT: Final = sql(
    "UPDATE agent_runs SET wait_kind = ?, wait_ref = ?, wait_until = ? WHERE id = ?"
)
_CLEAR_WAIT: Final = sql(
    "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL "
    "WHERE id = ? AND wait_kind = ? AND wait_ref = ?"
)
_READ: Final = sql("SELECT wake_at, completed_at FROM timers WHERE run_id = ? AND name = ?")
_CREATE: Final = sql(
    "INSERT INTO timers (run_id, name, wake_at, created_at) VALUES (?, ?, {now_plus}, "
    "zincir_now()) ON CONFLICT (run_id, name) DO NOTHING "
    "RETURNING wake_at, zincir_now() >= wake_at"
)
_STORED: Final = sql(
    "SELECT wake_at, completed_at, zincir_now() >= wake_at FROM timers "
    "WHERE run_id = ? AND name = ?"
)
_FIRE: Final = sql(
    "UPDATE timers SET completed_at = zincir_now() "
    "WHERE run_id = ? AND name = ? AND completed_at IS NULL RETURNING 1"
)


def set_wait(tx: Tx, run_id: str, kind: WaitKind, ref: str, until: datetime | None) -> None:
    """Record what the run is blocked on."""
    tx.execute(_SET_WAIT, (kind, ref, tx.stamp(until), run_id))


def clear_wait(tx: Tx, run_id: str, kind: WaitKind, ref: str) -> None:
    """Forget the run's wait if it is still this one."""
    tx.execute(_CLEAR_WAIT, (run_id, kind, ref))


def read_timer(tx: Tx, run_id: str, name: str) -> TimerRecord | None:
    """The stored timer ``name`` of ``run_id``, or None."""
    row = tx.one(_READ, (run_id, name))
    return None if row is None else timer_record(run_id, name, row, tx.time)


def ensure_timer(tx: Tx, lease: Lease, name: str, duration: timedelta) -> tuple[TimerRecord, bool]:
    """The stored timer ``name`` (created at now + ``duration``, fenced, with ``timer_set``)
    and whether it is due by the store's clock."""
    created = tx.one(_CREATE, (lease.run_id, name, micros(duration)))
    if created is not None:
        wake, due = tx.time(created[0]), bool(created[1])
        tx.append(lease, [timer_set(name, wake)])  # raises (and undoes) if fenced
        return TimerRecord(lease.run_id, name, wake, None), due
    # On PostgreSQL the conflicting row is committed (ON CONFLICT waited for its
    # transaction) and timers are never deleted, so this statement's snapshot holds it.
    stored = tx.one(_STORED, (lease.run_id, name))
    assert stored is not None, "a timer that conflicted is stored"
    timer = timer_record(lease.run_id, name, stored[:2], tx.time)
    return timer, bool(stored[2])


def fire_timer(
    tx: Tx, lease: Lease, name: str, event: str, details: dict[str, Any] | None = None
) -> bool:
    """Mark timer ``name`` completed and log ``event`` (with ``details``) for it, fenced.

    The conditional UPDATE locks the timer, so of two attempts firing it at once only one
    logs the event; False if another attempt fired it first.
    """
    fired = tx.one(_FIRE, (lease.run_id, name))
    tx.append(lease, [timer_fired(name, event, details)] if fired else [])
    return fired is not None


def sleep_attempt(tx: Tx, lease: Lease, name: str, duration: timedelta) -> WaitAttempt[None]:
    """Create timer ``name`` at now + ``duration`` if absent; fire it once due.

    Done once the timer fired (now or before); else the run's wait is recorded until the
    wake time, which is the attempt's deadline.
    """
    timer, due = ensure_timer(tx, lease, name, duration)
    if timer.completed:
        return WaitAttempt(True, None, timer.wake_at)
    if due:
        fire_timer(tx, lease, name, "timer_completed")
        clear_wait(tx, lease.run_id, "timer", name)
        return WaitAttempt(True, None, timer.wake_at)
    tx.append(lease)
    set_wait(tx, lease.run_id, "timer", name, timer.wake_at)
    return WaitAttempt(False, None, timer.wake_at)


class TimerOps(Rules):
    """Timers and the sleep attempt."""

    async def get_timer(self, run_id: str, name: str) -> TimerRecord | None:
        """Timer ``name`` of run ``run_id`` as stored, or None."""
        return await self._read_tx(lambda tx: read_timer(tx, run_id, name))

    async def sleep_attempt(
        self, lease: Lease, name: str, duration: timedelta
    ) -> WaitAttempt[None]:
        """Create timer ``name`` at now + ``duration`` if absent; fire it once due.

        Done once the timer fired (now or before); else the run's wait is recorded until
        the wake time, which is the attempt's deadline.
        """
        return await self._write_tx(lambda tx: sleep_attempt(tx, lease, name, duration))
