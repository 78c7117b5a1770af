"""Timers and waits: stored wake times, and what a run is blocked on (``agent_runs.wait_*``).

A wait is recorded in the same fenced transaction that found it unsatisfied, so that a
ResumeWorker does not claim the run before it is satisfied, even if its process dies while
waiting. One wait per run: the latest one wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

import apsw

from ..._time import from_db, to_db
from .._records import Lease
from .._workflow_records import TimerRecord, WaitAttempt, timer_record
from .._workflow_rules import timer_fired, timer_set
from ._base import SQLiteBase
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


def set_wait(
    conn: apsw.Connection, run_id: str, kind: WaitKind, ref: str, until: datetime | None
) -> None:
    """Record what the run is blocked on."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = ?, wait_ref = ?, wait_until = ? WHERE id = ?",
        (kind, ref, None if until is None else to_db(until), run_id),
    )


def clear_wait(conn: apsw.Connection, run_id: str, kind: WaitKind, ref: str) -> None:
    """Forget the run's wait if it is still this one."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL "
        "WHERE id = ? AND wait_kind = ? AND wait_ref = ?",
        (run_id, kind, ref),
    )


def read_timer(conn: apsw.Connection, run_id: str, name: str) -> TimerRecord | None:
    """The stored timer ``name`` of ``run_id``, or None."""
    row = conn.execute(
        "SELECT wake_at, completed_at FROM timers WHERE run_id = ? AND name = ?", (run_id, name)
    ).fetchone()
    if row is None:
        return None
    return timer_record(run_id, name, row, from_db)


def ensure_timer(
    conn: apsw.Connection, lease: Lease, now: datetime, name: str, duration: timedelta
) -> TimerRecord:
    """The stored timer ``name``, created at ``now + duration`` (fenced, with ``timer_set``)."""
    stored = read_timer(conn, lease.run_id, name)
    if stored is not None:
        return stored
    wake = now + duration
    append(conn, lease, now, [timer_set(name, wake)])
    conn.execute(
        "INSERT INTO timers (run_id, name, wake_at, created_at) VALUES (?, ?, ?, ?)",
        (lease.run_id, name, to_db(wake), to_db(now)),
    )
    return TimerRecord(lease.run_id, name, wake, None)


def fire_timer(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    name: str,
    event: str,
    details: dict[str, Any] | None = None,
) -> None:
    """Mark timer ``name`` completed and log ``event`` (with ``details``) for it, fenced."""
    append(conn, lease, now, [timer_fired(name, event, details)])
    conn.execute(
        "UPDATE timers SET completed_at = ? WHERE run_id = ? AND name = ? AND completed_at IS NULL",
        (to_db(now), lease.run_id, name),
    )


class TimerOps(SQLiteBase):
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

        def write(conn: apsw.Connection) -> WaitAttempt[None]:
            now = self.clock()
            timer = ensure_timer(conn, lease, now, name, duration)
            if timer.completed:
                return WaitAttempt(True, None, timer.wake_at)
            if now >= timer.wake_at:
                fire_timer(conn, lease, now, name, "timer_completed")
                clear_wait(conn, lease.run_id, "timer", name)
                return WaitAttempt(True, None, timer.wake_at)
            append(conn, lease, now)
            set_wait(conn, lease.run_id, "timer", name, timer.wake_at)
            return WaitAttempt(False, None, timer.wake_at)

        return await self._write(write)
