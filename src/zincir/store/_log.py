"""The event log's shared writes: a run's row created, and events appended under a fence
the same transaction already took (each backend inserts the rows: :meth:`Tx.insert_events`).

:func:`insert_run` is the one way a run's row is created (``running`` under a lease, with
its first transition, or ``pending``); :func:`append_checked` appends events to runs whose
row the caller's conditional write just fenced (a claim, a settled attempt, a cancel).
The fenced append itself is each backend's (:meth:`Tx.append`): SQLite leaves the holder's
row unwritten, PostgreSQL updates it under its lock. A fork's row and the copy of its
source's log before the fork point (:func:`insert_forked_run`, :func:`copy_log_prefix`) are
written here too: they create a run and write its log without a fence, as nothing owns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._errors import RunNotFound
from ._content import cut_events
from ._content_rows import write_content
from ._records import Lease, NewEvent
from ._run_rules import transition
from ._sql import Tx, micros, sql

__all__ = [
    "EVENT_COLUMNS",
    "append_checked",
    "copy_log_prefix",
    "insert_forked_run",
    "insert_run",
]

_PARENT: Final = sql("SELECT app_version FROM agent_runs WHERE id = ?")
_INSERT_RUN: Final = sql(
    "INSERT INTO agent_runs (id, parent_id, spawn_name, name, status, provider, app_version, "
    "config, lease_owner, lease_token, lease_expires_at, lease_ttl_us, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {now_plus}, ?, zincir_now(), zincir_now()) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1",
    seals=(7,),
    run_param=0,
)


_INSERT_FORK: Final = sql(
    "INSERT INTO agent_runs (id, name, status, provider, config, app_version, budget, "
    "lease_token, last_seq, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, zincir_now(), zincir_now()) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1",
    seals=(4,),
    run_param=0,
)
EVENT_COLUMNS: Final = "seq, type, payload, created_at, tool_call_id, payload_pieces"
"""An event row's columns but its run id, as a fork copies them."""
_COPY_LIVE: Final = sql(
    f"INSERT INTO events (run_id, {EVENT_COLUMNS}) SELECT ?, {EVENT_COLUMNS} FROM events "
    "WHERE run_id = ? AND seq < ?"
)
_UNARCHIVE: Final = sql(
    f"INSERT INTO events (run_id, {EVENT_COLUMNS}) SELECT ?, {EVENT_COLUMNS} "
    "FROM archived_events WHERE run_id = ? AND seq < ? "
    "AND (seq > ? OR (type = 'tool_call' AND tool_call_id {in_list}))"
)


def insert_run(
    tx: Tx,
    run_id: str,
    *,
    name: str,
    provider: str = "",
    config_json: str = "{}",
    parent_id: str | None = None,
    spawn_name: str | None = None,
    lease: Lease | None = None,
    app_version: str | None = None,
) -> bool:
    """Create run ``run_id``: ``running`` under ``lease`` (with its first state_transition),
    or ``pending`` and unowned without one. False if the id is taken; RunNotFound for a
    missing parent. A child without an ``app_version`` of its own inherits its parent's."""
    if parent_id is not None:
        parent = tx.one(_PARENT, (parent_id,))
        if parent is None:
            raise RunNotFound(f"the parent run {parent_id!r} does not exist", run_id=run_id)
        if app_version is None:
            app_version = parent[0]
    ttl = None if lease is None else micros(lease.ttl)
    created = tx.one(
        _INSERT_RUN,
        (
            run_id,
            parent_id,
            spawn_name,
            name,
            "running" if lease else "pending",
            provider,
            app_version,
            config_json,
            lease.owner if lease else None,
            lease.token if lease else 0,
            ttl,
            ttl,
        ),
    )
    if created is None:
        return False
    if lease is not None:
        tx.append(lease, [transition("pending", "running")])
    return True


def append_checked(tx: Tx, items: Sequence[tuple[str, int, Sequence[NewEvent]]]) -> None:
    """Append events to runs whose fence this transaction already took or checked.

    Each item is (run id, the run's last seq before, events): the caller's conditional
    UPDATE of the run's row (a claim that bumped the token, an attempt settled under its
    token) was the fence and already moved the row's ``last_seq`` past them. Long strings
    go to ``content`` (:func:`~._content.cut_events`) and the rows to :meth:`Tx.insert_events`.
    """
    rows: list[tuple[object, ...]] = []
    for run_id, before, events in items:
        stored, pieces = cut_events(events)
        if pieces:
            write_content(tx, run_id, pieces)
        rows.extend(
            (run_id, before + i + 1, kind, payload, call_id, parts)
            for i, (kind, payload, call_id, parts) in enumerate(stored)
        )
    if rows:
        tx.insert_events(rows)


def insert_forked_run(
    tx: Tx,
    run_id: str,
    *,
    name: str,
    status: str,
    provider: str,
    config_json: str,
    app_version: str | None,
    budget_json: str | None,
    lease_token: int,
    last_seq: int,
) -> bool:
    """Create a fork's row: unowned, its log ending at ``last_seq`` (copied next by
    :func:`copy_log_prefix`). False if the id is taken."""
    created = tx.one(
        _INSERT_FORK,
        (
            run_id,
            name,
            status,
            provider,
            config_json,
            app_version,
            budget_json,
            lease_token,
            last_seq,
        ),
    )
    return created is not None


def copy_log_prefix(
    tx: Tx, run_id: str, source: str, at_seq: int, *, through: int, kept_live: object
) -> None:
    """Copy ``source``'s live events before ``at_seq`` into run ``run_id``'s log, with the
    archived ones after ``through`` (or still open: ``kept_live``, a ``tx.values`` list)
    made live again; same seqs, the payloads' content shared by reference."""
    tx.execute(_COPY_LIVE, (run_id, source, at_seq))
    tx.execute(_UNARCHIVE, (run_id, source, at_seq, through, kept_live))
