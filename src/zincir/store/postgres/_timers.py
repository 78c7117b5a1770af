"""Timers and waits (PostgreSQL): stored wake times, and what a run is blocked on.

A wait (``agent_runs.wait_*``) is recorded in the same fenced transaction that found it
unsatisfied, so that a ResumeWorker does not claim the run before it is satisfied, even if
its process dies while waiting. One wait per run: the latest one wins. Wake times are set
and judged by the database clock (``zincir_now()``), never a worker's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from .._records import Lease
from .._workflow_records import TimerRecord, WaitAttempt, timer_record
from .._workflow_rules import timer_fired, timer_set
from ._base import Conn, PostgresBase, one
from ._log import append

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


def set_wait(conn: Conn, run_id: str, kind: WaitKind, ref: str, until: datetime | None) -> None:
    """Record what the run is blocked on."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = %s, wait_ref = %s, wait_until = %s WHERE id = %s",
        (kind, ref, until, run_id),
    )


def clear_wait(conn: Conn, run_id: str, kind: WaitKind, ref: str) -> None:
    """Forget the run's wait if it is still this one."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL "
        "WHERE id = %s AND wait_kind = %s AND wait_ref = %s",
        (run_id, kind, ref),
    )


def read_timer(conn: Conn, run_id: str, name: str) -> TimerRecord | None:
    """The stored timer ``name`` of ``run_id``, or None."""
    row = conn.execute(
        "SELECT wake_at, completed_at FROM timers WHERE run_id = %s AND name = %s",
        (run_id, name),
    ).fetchone()
    return None if row is None else timer_record(run_id, name, row)


def ensure_timer(
    conn: Conn, lease: Lease, name: str, duration: timedelta
) -> tuple[TimerRecord, bool]:
    """The stored timer ``name`` (created at the database's now + ``duration``, fenced, with
    ``timer_set``) and whether it is due by the database clock."""
    row = conn.execute(
        "INSERT INTO timers (run_id, name, wake_at, created_at) "
        "VALUES (%s, %s, zincir_now() + %s::interval, zincir_now()) "
        "ON CONFLICT (run_id, name) DO NOTHING RETURNING wake_at, zincir_now() >= wake_at",
        (lease.run_id, name, duration),
    ).fetchone()
    if row is not None:
        wake, due = row
        append(conn, lease, [timer_set(name, wake)])  # raises (and undoes) if fenced
        return TimerRecord(lease.run_id, name, wake, None), bool(due)
    # The conflicting row is committed (ON CONFLICT waited for its transaction) and timers
    # are never deleted, so this statement's snapshot holds it.
    wake, completed, due = one(
        conn,
        "SELECT wake_at, completed_at, zincir_now() >= wake_at FROM timers "
        "WHERE run_id = %s AND name = %s",
        (lease.run_id, name),
    )
    return TimerRecord(lease.run_id, name, wake, completed), bool(due)


def fire_timer(
    conn: Conn, lease: Lease, name: str, event: str, details: dict[str, Any] | None = None
) -> bool:
    """Mark timer ``name`` completed and log ``event`` (with ``details``) for it, fenced.

    The conditional UPDATE locks the timer, so of two attempts firing it at once only one
    logs the event; False if another attempt fired it first.
    """
    fired = conn.execute(
        "UPDATE timers SET completed_at = zincir_now() "
        "WHERE run_id = %s AND name = %s AND completed_at IS NULL RETURNING 1",
        (lease.run_id, name),
    ).fetchone()
    append(conn, lease, [timer_fired(name, event, details)] if fired else [])
    return fired is not None


class TimerOps(PostgresBase):
    """Timers and the sleep attempt."""

    async def get_timer(self, run_id: str, name: str) -> TimerRecord | None:
        """Timer ``name`` of run ``run_id`` as stored, or None."""
        return await self._read(lambda conn: read_timer(conn, run_id, name))

    async def sleep_attempt(
        self, lease: Lease, name: str, duration: timedelta
    ) -> WaitAttempt[None]:
        """Create timer ``name`` at now + ``duration`` if absent; fire it once due.

        Done once the timer fired (now or before); else the run's wait is recorded until
        the wake time, which is the attempt's deadline.
        """

        def write(conn: Conn) -> WaitAttempt[None]:
            timer, due = ensure_timer(conn, lease, name, duration)
            if timer.completed:
                return WaitAttempt(True, None, timer.wake_at)
            if due:
                fire_timer(conn, lease, name, "timer_completed")
                clear_wait(conn, lease.run_id, "timer", name)
                return WaitAttempt(True, None, timer.wake_at)
            append(conn, lease)
            set_wait(conn, lease.run_id, "timer", name, timer.wake_at)
            return WaitAttempt(False, None, timer.wake_at)

        return await self._write(write)
