"""Runs and leases, written once: creating, taking over, renewing, releasing and finishing a
run, and reading runs and their log.

A takeover reads the run's lease by the store's clock (``zincir_now()``) and judges it with
:func:`check_takeover`; on PostgreSQL the row stays locked (``{for_no_key_update}``) until
COMMIT, so of several processes taking over one expired run exactly one wins and the others
then see its live lease. Every fenced write goes through :meth:`Tx.append`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Final

from .._time import to_db
from ._content import event_rows
from ._content_rows import read_content
from ._log import insert_run
from ._records import (
    RUN_COLUMNS,
    RUN_SEALED,
    Event,
    Lease,
    NewEvent,
    RunRecord,
    event_record,
    event_seq,
    merge_by_seq,
)
from ._run_rules import (
    check_takeover,
    check_wait_kind,
    run_exists_error,
    transition,
    version_migrated,
)
from ._sql import Rules, Tx, micros, sql

__all__ = ["INLINE_EVENTS", "RunOps", "acquire", "read_events", "run_record"]

INLINE_EVENTS: Final = 256
"""A log read of at most this many events runs on the caller's thread."""

_LIVE: Final = "status IN ('pending', 'running')"
_FENCED: Final = f"WHERE id = ? AND lease_owner = ? AND lease_token = ? AND {_LIVE}"
_LAGGING: Final = {
    "last_seq": "{last_seq}",
    "updated_at": "{updated_at}",
    "lease_expires_at": "{lease_expiry}",
}
_RUN: Final = (
    "SELECT "
    + ", ".join(
        f"{_LAGGING[column]} AS {column}" if column in _LAGGING else column
        for column in RUN_COLUMNS
    )
    + " FROM agent_runs"
)
_GET: Final = sql(_RUN + " WHERE id = ?", opens=RUN_SEALED, run_param=0)
_LIST: Final = sql(_RUN + " ORDER BY updated_at DESC, id LIMIT ?", opens=RUN_SEALED)
_LIST_OF: Final = sql(
    _RUN + " WHERE status = ? ORDER BY updated_at DESC, id LIMIT ?", opens=RUN_SEALED
)
_TIMES: Final = ("lease_expires_at", "next_attempt_at", "wait_until", "created_at", "updated_at")
_TIME_AT: Final = tuple(RUN_COLUMNS.index(column) for column in _TIMES)

_LAST_SEQ: Final = sql("SELECT {last_seq} FROM agent_runs WHERE id = ?")
_EVENTS: Final = {
    (table, bounded): sql(
        f"SELECT seq, type, payload, created_at, payload_pieces FROM {table} "
        "WHERE run_id = ? AND seq > ? ORDER BY seq" + (" LIMIT ?" if bounded else ""),
        opens=(2,),
        run_param=0,
    )
    for table in ("events", "archived_events")
    for bounded in (False, True)
}
_ARCHIVED: Final = sql("SELECT 1 FROM archived_events WHERE run_id = ? AND seq > ? LIMIT 1")

_LEASE: Final = sql(
    "SELECT status, lease_owner, {lease_expiry:r}, {lease_expiry:r} > zincir_now() "
    "FROM agent_runs AS r WHERE id = ?{for_no_key_update}"
)
_TAKE: Final = sql(
    "UPDATE agent_runs SET lease_owner = ?, lease_token = lease_token + 1, "
    "lease_expires_at = {now_plus}, lease_ttl_us = ?, last_seq = {last_seq}, "
    "updated_at = zincir_now() WHERE id = ? RETURNING lease_token"
)
_RUNNING: Final = sql("UPDATE agent_runs SET status = 'running' WHERE id = ?")
_REOPENED: Final = sql(
    "UPDATE agent_runs SET status = 'running', wait_kind = NULL, wait_ref = NULL, "
    "wait_until = NULL WHERE id = ?"
)
_RENEW: Final = sql(
    "UPDATE agent_runs SET lease_expires_at = {now_plus}, last_seq = {last_seq}, "
    f"updated_at = {{updated_at}} {_FENCED} RETURNING 1"
)
_RELEASE: Final = sql(
    "UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL, "
    "last_seq = {last_seq}, updated_at = zincir_now() WHERE id = ? AND lease_owner = ? "
    "AND lease_token = ? RETURNING 1"
)
_FINISH: Final = sql(
    "UPDATE agent_runs SET status = ?, result = ?, last_error = ?, lease_owner = NULL, "
    "lease_expires_at = NULL, wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    "last_seq = ?, updated_at = zincir_now() WHERE id = ?",
    seals=(1, 2),
    run_param=4,
)
_VERSION: Final = sql("SELECT app_version FROM agent_runs WHERE id = ?{for_no_key_update}")
_SET_VERSION: Final = sql("UPDATE agent_runs SET app_version = ? WHERE id = ?")
_SET_BUDGET: Final = sql("UPDATE agent_runs SET budget = ? WHERE id = ?")
_SET_WAIT: Final = sql(
    "UPDATE agent_runs SET wait_kind = ?, wait_ref = ?, wait_until = ? WHERE id = ?"
)


def _text(value: Any) -> Any:
    """A stored time as the fixed-width UTC text records carry (SQLite's is already)."""
    return value if value is None or isinstance(value, str) else to_db(value)


def run_record(row: Sequence[Any]) -> RunRecord:
    """An ``agent_runs`` row, selected as a :class:`RunRecord`'s columns, as one."""
    values = list(row)
    for at in _TIME_AT:
        values[at] = _text(values[at])
    record: RunRecord = dict(zip(RUN_COLUMNS, values, strict=True))  # type: ignore[assignment]
    return record


def read_events(tx: Tx, run_id: str, after_seq: int, limit: int | None = None) -> list[Event]:
    """Events of ``run_id`` with seq > ``after_seq``, in order (all without ``limit``): the
    live log merged with what compaction archived (one index probe when nothing was)."""
    live = _events_of(tx, "events", run_id, after_seq, limit)
    if tx.one(_ARCHIVED, (run_id, after_seq)) is None:
        return live
    older = _events_of(tx, "archived_events", run_id, after_seq, limit)
    return merge_by_seq(older, live, event_seq, limit)


def _events_of(tx: Tx, table: str, run_id: str, after_seq: int, limit: int | None) -> list[Event]:
    params = (run_id, after_seq) if limit is None else (run_id, after_seq, limit)
    rows = tx.all(_EVENTS[table, limit is not None], params)
    return [
        event_record(run_id, row, tx.time)
        for row in event_rows(rows, partial(read_content, tx), run_id)
    ]


def acquire(tx: Tx, run_id: str, owner: str, ttl: timedelta, *, force: bool) -> tuple[int, str]:
    """Take the lease of an existing non-terminal run; return (token, status before)."""
    row = tx.one(_LEASE, (run_id,))
    status = check_takeover(
        run_id,
        None if row is None else row[:2],
        live=row is not None and bool(row[3]),
        until=None if row is None else _text(row[2]),
        force=force,
    )
    span = micros(ttl)
    taken = tx.one(_TAKE, (owner, span, span, run_id))
    assert taken is not None, "the run's row was just read"
    return int(taken[0]), status


def open_run(
    tx: Tx,
    run_id: str,
    *,
    name: str,
    owner: str,
    ttl: timedelta,
    config_json: str,
    app_version: str | None,
) -> Lease:
    """Create run ``run_id`` under a new lease, or take it over: ``running``, its wait
    cleared (its new owner replays the workflow, which records any wait still pending)."""
    fresh = Lease(run_id, owner, 1, ttl)
    if insert_run(
        tx, run_id, name=name, config_json=config_json, lease=fresh, app_version=app_version
    ):
        return fresh
    token, status = acquire(tx, run_id, owner, ttl, force=False)
    lease = Lease(run_id, owner, token, ttl)
    tx.execute(_REOPENED, (run_id,))
    if status == "pending":
        tx.append(lease, [transition("pending", "running")])
    return lease


def acquire_run(tx: Tx, run_id: str, owner: str, ttl: timedelta, *, force: bool) -> Lease:
    """Take over an existing run under a new token; a pending one starts running."""
    token, status = acquire(tx, run_id, owner, ttl, force=force)
    lease = Lease(run_id, owner, token, ttl)
    if status == "pending":
        tx.execute(_RUNNING, (run_id,))
        tx.append(lease, [transition("pending", "running")])
    return lease


def finish_run(
    tx: Tx, lease: Lease, status: str, result_json: str | None, error: str | None
) -> None:
    """Move the run to a terminal ``status`` (fenced), with its transition, and clear its
    lease and wait."""
    last_seq = tx.append(lease, [transition("running", status)])
    tx.execute(_FINISH, (status, result_json, error, last_seq, lease.run_id))


def set_app_version(tx: Tx, lease: Lease, version: str) -> int:
    """Move the run to ``version`` (fenced) with its ``version_migrated`` event; the version
    it has changes nothing but the lease's expiry."""
    row = tx.one(_VERSION, (lease.run_id,))
    old = None if row is None else row[0]
    if row is not None and old == version:
        return tx.append(lease)
    last_seq = tx.append(lease, [version_migrated(old, version)])
    tx.execute(_SET_VERSION, (version, lease.run_id))
    return last_seq


def record_budget(tx: Tx, lease: Lease, budget_json: str) -> int:
    """Log ``budget_set`` (fenced) and keep ``budget_json`` as the run's budget in force."""
    last_seq = tx.append(lease, [NewEvent("budget_set", budget_json)])
    tx.execute(_SET_BUDGET, (budget_json, lease.run_id))
    return last_seq


def set_run_wait(
    tx: Tx, lease: Lease, kind: str | None, ref: str | None, until: datetime | None
) -> None:
    """Record (fenced) what the run waits for, or clear it with ``kind=None``."""
    tx.append(lease)
    tx.execute(
        _SET_WAIT,
        (kind, ref if kind else None, tx.stamp(until) if kind else None, lease.run_id),
    )


def list_events(tx: Tx, run_id: str, after_seq: int, limit: int | None) -> list[Event] | None:
    """The events :func:`read_events` reads, or None when there are more than
    :data:`INLINE_EVENTS` to read on the caller's thread."""
    if limit is None or limit > INLINE_EVENTS:
        row = tx.one(_LAST_SEQ, (run_id,))
        if row is not None and int(row[0]) - after_seq > INLINE_EVENTS:
            return None
    return read_events(tx, run_id, after_seq, limit)


class RunOps(Rules):
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

        def write(tx: Tx) -> Lease:
            if not insert_run(
                tx,
                run_id,
                name=name,
                provider=provider,
                config_json=config_json,
                parent_id=parent_id,
                lease=lease,
                app_version=app_version,
            ):
                raise run_exists_error(run_id, "use AgentContext.recover to take it over")
            return lease

        return await self._write_tx(write)

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
        return await self._write_tx(
            lambda tx: open_run(
                tx,
                run_id,
                name=name,
                owner=owner,
                ttl=ttl,
                config_json=config_json,
                app_version=app_version,
            )
        )

    async def acquire_run(
        self, run_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> Lease:
        """Take over an existing run: a new token; LeaseHeld while another lease is live
        (unless ``force``), RunTerminal for a finished run, RunNotFound for none."""
        return await self._write_tx(lambda tx: acquire_run(tx, run_id, owner, ttl, force=force))

    async def renew_lease(self, lease: Lease) -> bool:
        """Extend ``lease``; False if it was taken over, released or its run finished."""
        params = (micros(lease.ttl), lease.run_id, lease.owner, lease.token)
        return await self._write_tx(lambda tx: tx.one(_RENEW, params) is not None)

    async def release_lease(self, lease: Lease) -> bool:
        """Drop ``lease`` if it still holds its run; False if it was already gone."""
        params = (lease.run_id, lease.owner, lease.token)
        return await self._write_tx(lambda tx: tx.one(_RELEASE, params) is not None)

    async def finish_run(
        self, lease: Lease, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None:
        """Move the run to a terminal ``status`` (fenced), with its transition, and clear
        its lease and wait."""
        await self._write_tx(lambda tx: finish_run(tx, lease, status, result_json, error))

    async def append_events(self, lease: Lease, events: Sequence[NewEvent]) -> int:
        """Append ``events`` to the lease's run (fenced, gapless); return the last seq."""
        batch = list(events)
        return await self._write_tx(lambda tx: tx.append(lease, batch))

    async def set_app_version(self, lease: Lease, version: str) -> int:
        """Move the lease's run to application version ``version`` (fenced), with its
        ``version_migrated`` event (from, to) in the same transaction; return the run's last
        seq. The version the run already has changes nothing but the lease's expiry."""
        return await self._write_tx(lambda tx: set_app_version(tx, lease, version))

    async def record_budget(self, lease: Lease, budget_json: str) -> int:
        """Log ``budget_set`` (fenced) and keep ``budget_json`` as the run's budget in force,
        in one transaction; return the event's seq."""
        return await self._write_tx(lambda tx: record_budget(tx, lease, budget_json))

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
            to_db(until)  # InvalidInput for a naive datetime, before any write
        await self._write_tx(lambda tx: set_run_wait(tx, lease, kind, ref, until))

    # -- reads --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""

        def read(tx: Tx) -> RunRecord | None:
            row = tx.one(_GET, (run_id,))
            return None if row is None else run_record(row)

        return await self._read_tx(read)

    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[RunRecord]:
        """The latest runs (by update time), optionally of one status."""

        def read(tx: Tx) -> list[RunRecord]:
            rows = tx.all(_LIST_OF, (status, limit)) if status else tx.all(_LIST, (limit,))
            return [run_record(row) for row in rows]

        return await self._read_tx(read, offload=limit > INLINE_EVENTS)

    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of ``run_id`` with seq > ``after_seq``, in order (at most ``limit``).

        A short read runs on the calling thread; a long one on a worker thread.
        """
        events = await self._read_tx(lambda tx: list_events(tx, run_id, after_seq, limit))
        if events is None:
            events = await self._read_tx(
                lambda tx: read_events(tx, run_id, after_seq, limit), offload=True
            )
        return events
