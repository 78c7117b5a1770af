"""Runs and leases: creating, taking over, renewing, releasing and finishing a run; its log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import apsw

from ..._time import from_db, to_db
from .._content import event_rows
from .._records import (
    RUN_COLUMNS,
    Event,
    Lease,
    NewEvent,
    RunRecord,
    event_record,
    event_seq,
    merge_by_seq,
)
from .._run_rules import (
    check_takeover,
    check_wait_kind,
    run_exists_error,
    transition,
    version_migrated,
)
from ._base import SQLiteBase, one
from ._content import reader
from ._log import append, insert_run, last_seq_sql, lease_expiry_sql, ttl_us, updated_at_sql

__all__ = ["RunOps", "acquire", "read_events", "run_record"]

_DERIVED = {
    "last_seq": last_seq_sql(),
    "updated_at": updated_at_sql(),
    "lease_expires_at": lease_expiry_sql(),
}
_RUN_SELECT = (
    "SELECT "
    + ", ".join(
        f"{_DERIVED[column]} AS {column}" if column in _DERIVED else column
        for column in RUN_COLUMNS
    )
    + " FROM agent_runs"
)
"""A run's columns, its last seq, update time and lease expiry read as the lease holder's
appends left them (the row itself lags behind those)."""
_INLINE_EVENTS = 256  # a log read of at most this many events runs on the caller's thread


def run_record(row: tuple[object, ...]) -> RunRecord:
    """An ``agent_runs`` row (selected by ``_RUN_SELECT``) as a RunRecord."""
    record: RunRecord = dict(zip(RUN_COLUMNS, row, strict=True))  # type: ignore[assignment]
    return record


def read_events(
    conn: apsw.Connection, run_id: str, after_seq: int, limit: int | None = None
) -> list[Event]:
    """Events of ``run_id`` with seq > ``after_seq``, in order: the live log merged with
    what compaction archived (one index probe when nothing was)."""
    bound = -1 if limit is None else limit
    live = _events_of(conn, "events", run_id, after_seq, bound)
    archived = conn.execute(
        "SELECT 1 FROM archived_events WHERE run_id = ? AND seq > ? LIMIT 1", (run_id, after_seq)
    ).fetchone()
    if archived is None:
        return live
    older = _events_of(conn, "archived_events", run_id, after_seq, bound)
    return merge_by_seq(older, live, event_seq, limit)


def _events_of(
    conn: apsw.Connection, table: str, run_id: str, after_seq: int, limit: int
) -> list[Event]:
    rows = conn.execute(
        f"SELECT seq, type, payload, created_at, payload_pieces FROM {table} "
        "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, after_seq, limit),
    )
    return [event_record(run_id, row, from_db) for row in event_rows(rows, reader(conn), run_id)]


def acquire(
    conn: apsw.Connection,
    run_id: str,
    owner: str,
    ttl: timedelta,
    now_text: str,
    expires: str,
    *,
    force: bool,
) -> tuple[int, str]:
    """Take the lease of an existing non-terminal run; return (token, status before)."""
    row = conn.execute(
        f"SELECT status, lease_owner, {lease_expiry_sql()} FROM agent_runs WHERE id = ?",
        (run_id,),
    ).fetchone()
    expiry = None if row is None else row[2]
    status = check_takeover(
        run_id,
        None if row is None else row[:2],
        live=expiry is not None and expiry > now_text,
        until=expiry,
        force=force,
    )
    (token,) = one(
        conn,
        "UPDATE agent_runs SET lease_owner = ?, lease_token = lease_token + 1, "
        f"lease_expires_at = ?, lease_ttl_us = ?, last_seq = {last_seq_sql()}, updated_at = ? "
        "WHERE id = ? RETURNING lease_token",
        (owner, expires, ttl_us(ttl), now_text, run_id),
    )
    return int(token), status


class RunOps(SQLiteBase):
    """Runs, leases and the event log."""

    async def create_run(
        self,
        run_id: str,
        *,
        name: str,
        owner: str,
        ttl: timedelta,
        provider: str = "",
        config_json: str = "{}",
        parent_id: str | None = None,
        app_version: str | None = None,
    ) -> Lease:
        """Create a ``running`` run under a new lease (token 1) with its first transition.

        RunExists if the id is taken, RunNotFound if ``parent_id`` names no run. A child
        without an ``app_version`` inherits its parent's.
        """
        lease = Lease(run_id, owner, 1, ttl)

        def write(conn: apsw.Connection) -> Lease:
            created = insert_run(
                conn,
                run_id,
                self.clock(),
                name=name,
                provider=provider,
                config_json=config_json,
                parent_id=parent_id,
                lease=lease,
                app_version=app_version,
            )
            if not created:
                raise run_exists_error(run_id, "use AgentContext.recover to take it over")
            return lease

        return await self._write(write)

    async def open_run(
        self,
        run_id: str,
        *,
        name: str,
        owner: str,
        ttl: timedelta,
        config_json: str = "{}",
        app_version: str | None = None,
    ) -> Lease:
        """Create run ``run_id`` if absent, else take it over (LeaseHeld while live).

        A taken-over run is ``running`` with no recorded wait: its new owner replays the
        workflow, which records any wait still pending. ``app_version`` is stored on a
        created run only: a taken-over run keeps the version it has.
        """

        def write(conn: apsw.Connection) -> Lease:
            now = self.clock()
            fresh = Lease(run_id, owner, 1, ttl)
            if insert_run(
                conn,
                run_id,
                now,
                name=name,
                config_json=config_json,
                lease=fresh,
                app_version=app_version,
            ):
                return fresh
            token, status = acquire(
                conn, run_id, owner, ttl, to_db(now), fresh.expiry(now), force=False
            )
            lease = Lease(run_id, owner, token, ttl)
            conn.execute(
                "UPDATE agent_runs SET status = 'running', wait_kind = NULL, wait_ref = NULL, "
                "wait_until = NULL WHERE id = ?",
                (run_id,),
            )
            if status == "pending":
                append(conn, lease, now, [transition("pending", "running")])
            return lease

        return await self._write(write)

    async def acquire_run(
        self, run_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> Lease:
        """Take over an existing run: a new token; LeaseHeld while another lease is live
        (unless ``force``), RunTerminal for a finished run, RunNotFound for none."""

        def write(conn: apsw.Connection) -> Lease:
            now = self.clock()
            token, status = acquire(
                conn, run_id, owner, ttl, to_db(now), to_db(now + ttl), force=force
            )
            lease = Lease(run_id, owner, token, ttl)
            if status == "pending":
                conn.execute("UPDATE agent_runs SET status = 'running' WHERE id = ?", (run_id,))
                append(conn, lease, now, [transition("pending", "running")])
            return lease

        return await self._write(write)

    async def renew_lease(self, lease: Lease) -> bool:
        """Extend ``lease``; False if it was taken over, released or its run finished."""

        def write(conn: apsw.Connection) -> bool:
            return (
                conn.execute(
                    f"UPDATE agent_runs SET lease_expires_at = ?, last_seq = {last_seq_sql()}, "
                    f"updated_at = {updated_at_sql()} WHERE id = ? "
                    "AND lease_owner = ? AND lease_token = ? "
                    "AND status IN ('pending', 'running') RETURNING 1",
                    (lease.expiry(self.clock()), lease.run_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def release_lease(self, lease: Lease) -> bool:
        """Drop ``lease`` if it still holds its run; False if it was already gone."""

        def write(conn: apsw.Connection) -> bool:
            return (
                conn.execute(
                    "UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL, "
                    f"last_seq = {last_seq_sql()}, updated_at = ? WHERE id = ? "
                    "AND lease_owner = ? AND lease_token = ? RETURNING 1",
                    (to_db(self.clock()), lease.run_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def finish_run(
        self, lease: Lease, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None:
        """Move the run to a terminal ``status`` (fenced), with its transition, and clear
        its lease and wait."""

        def write(conn: apsw.Connection) -> None:
            now = self.clock()
            stamp = to_db(now)
            last_seq = append(conn, lease, now, [transition("running", status)], stamp=stamp)
            conn.execute(
                "UPDATE agent_runs SET status = ?, result = ?, last_error = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, wait_kind = NULL, "
                "wait_ref = NULL, wait_until = NULL, last_seq = ?, updated_at = ? WHERE id = ?",
                (status, result_json, error, last_seq, stamp, lease.run_id),
            )

        await self._write(write)

    async def append_events(self, lease: Lease, events: Sequence[NewEvent]) -> int:
        """Append ``events`` to the lease's run (fenced, gapless); return the last seq."""
        batch = list(events)
        return await self._write(lambda conn: append(conn, lease, self.clock(), batch))

    async def set_app_version(self, lease: Lease, version: str) -> int:
        """Move the lease's run to application version ``version`` (fenced), with its
        ``version_migrated`` event (from, to) in the same transaction; return the run's last
        seq. The version the run already has changes nothing but the lease's expiry."""

        def write(conn: apsw.Connection) -> int:
            now = self.clock()
            row = conn.execute(
                "SELECT app_version FROM agent_runs WHERE id = ?", (lease.run_id,)
            ).fetchone()
            old = None if row is None else row[0]
            if row is not None and old == version:
                return append(conn, lease, now)
            last_seq = append(conn, lease, now, [version_migrated(old, version)])
            conn.execute(
                "UPDATE agent_runs SET app_version = ? WHERE id = ?", (version, lease.run_id)
            )
            return last_seq

        return await self._write(write)

    async def record_budget(self, lease: Lease, budget_json: str) -> int:
        """Log ``budget_set`` (fenced) and keep ``budget_json`` as the run's budget in force,
        in one transaction; return the event's seq."""

        def write(conn: apsw.Connection) -> int:
            last_seq = append(conn, lease, self.clock(), [NewEvent("budget_set", budget_json)])
            conn.execute(
                "UPDATE agent_runs SET budget = ? WHERE id = ?", (budget_json, lease.run_id)
            )
            return last_seq

        return await self._write(write)

    async def set_run_wait(
        self,
        lease: Lease,
        kind: str | None,
        ref: str | None = None,
        until: datetime | None = None,
    ) -> None:
        """Record (fenced) what the lease's run waits for, or clear it with ``kind=None``.

        A ResumeWorker claims a waiting run only once its wait is satisfied: a message on
        topic ``ref`` (kind ``message``), child ``ref`` terminal (``child``), or ``until``.
        """
        check_wait_kind(kind)

        def write(conn: apsw.Connection) -> None:
            append(conn, lease, self.clock())
            conn.execute(
                "UPDATE agent_runs SET wait_kind = ?, wait_ref = ?, wait_until = ? WHERE id = ?",
                (
                    kind,
                    ref if kind else None,
                    to_db(until) if kind and until else None,
                    lease.run_id,
                ),
            )

        await self._write(write)

    # -- reads --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""

        def read(conn: apsw.Connection) -> RunRecord | None:
            row = conn.execute(f"{_RUN_SELECT} WHERE id = ?", (run_id,)).fetchone()
            return None if row is None else run_record(row)

        return await self._read(read)

    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[RunRecord]:
        """The latest runs (by update time), optionally of one status."""

        def read(conn: apsw.Connection) -> list[RunRecord]:
            where, params = ("WHERE status = ?", (status,)) if status else ("", ())
            return [
                run_record(row)
                for row in conn.execute(
                    f"{_RUN_SELECT} {where} ORDER BY updated_at DESC, id LIMIT ?", (*params, limit)
                )
            ]

        return await self._read(read, offload=limit > _INLINE_EVENTS)

    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of ``run_id`` with seq > ``after_seq``, in order (at most ``limit``).

        A short read runs on the calling thread; a long one on a worker thread.
        """

        def short(conn: apsw.Connection) -> list[Event] | None:
            if limit is None or limit > _INLINE_EVENTS:
                row = conn.execute(
                    f"SELECT {last_seq_sql()} FROM agent_runs WHERE id = ?", (run_id,)
                ).fetchone()
                if row is not None and int(row[0]) - after_seq > _INLINE_EVENTS:
                    return None
            return read_events(conn, run_id, after_seq, limit)

        events = await self._read(short)
        if events is None:
            events = await self._read(
                lambda conn: read_events(conn, run_id, after_seq, limit), offload=True
            )
        return events
