"""PostgreSQL: runs and leases (creating, taking over, renewing, releasing and finishing a
run) and reading its log.

A takeover locks the run's row (``FOR NO KEY UPDATE``) before judging its lease by the database
clock, so of several processes taking over one expired run exactly one wins; the others
then see its live lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ..._time import to_db
from .._content import event_rows
from .._records import Event, Lease, NewEvent, RunRecord, event_record, event_seq, merge_by_seq
from .._run_rules import (
    check_takeover,
    check_wait_kind,
    run_exists_error,
    transition,
    version_migrated,
)
from ._base import Conn, PostgresBase, one
from ._content import reader
from ._log import RUN_SELECT, append, insert_run, run_record, text_time

__all__ = ["RunOps", "acquire", "read_events"]


def read_events(conn: Conn, run_id: str, after_seq: int, limit: int | None = None) -> list[Event]:
    """Events of ``run_id`` with seq > ``after_seq``, in order (all of them without
    ``limit``): the live log merged with what compaction archived (one index probe when
    nothing was)."""
    live = _events_of(conn, "events", run_id, after_seq, limit)
    archived = conn.execute(
        "SELECT 1 FROM archived_events WHERE run_id = %s AND seq > %s LIMIT 1",
        (run_id, after_seq),
    ).fetchone()
    if archived is None:
        return live
    older = _events_of(conn, "archived_events", run_id, after_seq, limit)
    return merge_by_seq(older, live, event_seq, limit)


def _events_of(
    conn: Conn, table: str, run_id: str, after_seq: int, limit: int | None
) -> list[Event]:
    rows = conn.execute(
        f"SELECT seq, type, payload, created_at, payload_pieces FROM {table} "
        "WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (run_id, after_seq, limit),
    )
    return [event_record(run_id, row) for row in event_rows(rows, reader(conn), run_id)]


def acquire(conn: Conn, run_id: str, owner: str, ttl: timedelta, *, force: bool) -> tuple[int, str]:
    """Take the lease of an existing non-terminal run; return (token, status before).

    The run's row stays locked until COMMIT, so a racing takeover waits and then sees this
    one's live lease.
    """
    row = conn.execute(
        "SELECT status, lease_owner, lease_expires_at, lease_expires_at > zincir_now() "
        "FROM agent_runs WHERE id = %s FOR NO KEY UPDATE",
        (run_id,),
    ).fetchone()
    status = check_takeover(
        run_id,
        None if row is None else row[:2],
        live=row is not None and bool(row[3]),
        until=None if row is None else text_time(row[2]),
        force=force,
    )
    (token,) = one(
        conn,
        "UPDATE agent_runs SET lease_owner = %s, lease_token = lease_token + 1, "
        "lease_expires_at = zincir_now() + %s::interval, updated_at = zincir_now() "
        "WHERE id = %s RETURNING lease_token",
        (owner, ttl, run_id),
    )
    return int(token), status


class RunOps(PostgresBase):
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

        def write(conn: Conn) -> Lease:
            created = insert_run(
                conn,
                run_id,
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

        def write(conn: Conn) -> Lease:
            fresh = Lease(run_id, owner, 1, ttl)
            if insert_run(
                conn,
                run_id,
                name=name,
                config_json=config_json,
                lease=fresh,
                app_version=app_version,
            ):
                return fresh
            token, status = acquire(conn, run_id, owner, ttl, force=False)
            lease = Lease(run_id, owner, token, ttl)
            conn.execute(
                "UPDATE agent_runs SET status = 'running', wait_kind = NULL, wait_ref = NULL, "
                "wait_until = NULL WHERE id = %s",
                (run_id,),
            )
            if status == "pending":
                append(conn, lease, [transition("pending", "running")])
            return lease

        return await self._write(write)

    async def acquire_run(
        self, run_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> Lease:
        """Take over an existing run: a new token; LeaseHeld while another lease is live
        (unless ``force``), RunTerminal for a finished run, RunNotFound for none."""

        def write(conn: Conn) -> Lease:
            token, status = acquire(conn, run_id, owner, ttl, force=force)
            lease = Lease(run_id, owner, token, ttl)
            if status == "pending":
                conn.execute("UPDATE agent_runs SET status = 'running' WHERE id = %s", (run_id,))
                append(conn, lease, [transition("pending", "running")])
            return lease

        return await self._write(write)

    async def renew_lease(self, lease: Lease) -> bool:
        """Extend ``lease``; False if it was taken over, released or its run finished."""

        def write(conn: Conn) -> bool:
            return (
                conn.execute(
                    "UPDATE agent_runs SET lease_expires_at = zincir_now() + %s::interval "
                    "WHERE id = %s AND lease_owner = %s AND lease_token = %s "
                    "AND status IN ('pending', 'running') RETURNING 1",
                    (lease.ttl, lease.run_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def release_lease(self, lease: Lease) -> bool:
        """Drop ``lease`` if it still holds its run; False if it was already gone."""

        def write(conn: Conn) -> bool:
            return (
                conn.execute(
                    "UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL, "
                    "updated_at = zincir_now() WHERE id = %s AND lease_owner = %s "
                    "AND lease_token = %s RETURNING 1",
                    (lease.run_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def finish_run(
        self, lease: Lease, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None:
        """Move the run to a terminal ``status`` (fenced), with its transition, and clear
        its lease and wait."""

        def write(conn: Conn) -> None:
            append(conn, lease, [transition("running", status)])
            conn.execute(
                "UPDATE agent_runs SET status = %s, result = %s, last_error = %s, "
                "lease_owner = NULL, lease_expires_at = NULL, wait_kind = NULL, "
                "wait_ref = NULL, wait_until = NULL WHERE id = %s",
                (status, result_json, error, lease.run_id),
            )

        await self._write(write)

    async def append_events(self, lease: Lease, events: Sequence[NewEvent]) -> int:
        """Append ``events`` to the lease's run (fenced, gapless); return the last seq."""
        batch = list(events)
        return await self._write(lambda conn: append(conn, lease, batch))

    async def set_app_version(self, lease: Lease, version: str) -> int:
        """Move the lease's run to application version ``version`` (fenced), with its
        ``version_migrated`` event (from, to) in the same transaction; return the run's last
        seq. The version the run already has changes nothing but the lease's expiry."""

        def write(conn: Conn) -> int:
            row = conn.execute(
                "SELECT app_version FROM agent_runs WHERE id = %s FOR NO KEY UPDATE",
                (lease.run_id,),
            ).fetchone()
            old = None if row is None else row[0]
            if row is not None and old == version:
                return append(conn, lease)
            last_seq = append(conn, lease, [version_migrated(old, version)])
            conn.execute(
                "UPDATE agent_runs SET app_version = %s WHERE id = %s", (version, lease.run_id)
            )
            return last_seq

        return await self._write(write)

    async def record_budget(self, lease: Lease, budget_json: str) -> int:
        """Log ``budget_set`` (fenced) and keep ``budget_json`` as the run's budget in force,
        in one transaction; return the event's seq."""

        def write(conn: Conn) -> int:
            last_seq = append(conn, lease, [NewEvent("budget_set", budget_json)])
            conn.execute(
                "UPDATE agent_runs SET budget = %s WHERE id = %s", (budget_json, lease.run_id)
            )
            return int(last_seq)

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
        if until is not None:
            to_db(until)  # InvalidInput for a naive datetime, as on every backend

        def write(conn: Conn) -> None:
            append(conn, lease)
            conn.execute(
                "UPDATE agent_runs SET wait_kind = %s, wait_ref = %s, wait_until = %s "
                "WHERE id = %s",
                (kind, ref if kind else None, until if kind else None, lease.run_id),
            )

        await self._write(write)

    # -- reads --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""

        def read(conn: Conn) -> RunRecord | None:
            row = conn.execute(f"{RUN_SELECT} WHERE id = %s", (run_id,)).fetchone()
            return None if row is None else run_record(row)

        return await self._read(read)

    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[RunRecord]:
        """The latest runs (by update time), optionally of one status."""

        def read(conn: Conn) -> list[RunRecord]:
            where, params = ("WHERE status = %s", (status,)) if status else ("", ())
            return [
                run_record(row)
                for row in conn.execute(
                    f"{RUN_SELECT} {where} ORDER BY updated_at DESC, id LIMIT %s",
                    (*params, limit),
                )
            ]

        return await self._read(read)

    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of ``run_id`` with seq > ``after_seq``, in order (at most ``limit``)."""
        return await self._read(lambda conn: read_events(conn, run_id, after_seq, limit))
