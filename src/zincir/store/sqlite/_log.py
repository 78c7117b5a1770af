"""The one writer of the event log and the one place a run's fence is checked.

Every event of every run is appended by :func:`append` (or :func:`append_checked` for runs
whose row the same transaction has just fenced: a claim, a settled attempt), inside the
caller's write transaction: it checks the lease's owner and token against the run's row,
extends the lease, allocates the next gapless sequence numbers and inserts the events. A
fenced owner's transaction raises before anything is stored. :func:`insert_run` is the one
way a run's row is created.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import apsw

from ..._errors import RunNotFound
from ..._time import to_db
from .._records import Lease, NewEvent
from .._run_rules import fence_error, transition

__all__ = [
    "append",
    "append_checked",
    "check_fence",
    "diagnose",
    "insert_run",
]

_INSERT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def diagnose(conn: apsw.Connection, run_id: str, token: int) -> Exception:
    """Why a fenced write matched no row: missing run, terminal run, or a newer owner."""
    row = conn.execute(
        "SELECT status, lease_token FROM agent_runs WHERE id = ?", (run_id,)
    ).fetchone()
    return fence_error(run_id, token, row)


def check_fence(conn: apsw.Connection, lease: Lease) -> None:
    """Raise unless ``lease`` still owns its live run; a read, for writes that leave the
    run's row alone (a step claim)."""
    held = conn.execute(
        "SELECT 1 FROM agent_runs WHERE id = ? AND lease_owner = ? AND lease_token = ? "
        "AND status IN ('pending', 'running')",
        (lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if held is None:
        raise diagnose(conn, lease.run_id, lease.token)


def append(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    events: Sequence[NewEvent] = (),
    *,
    stamp: str | None = None,
) -> int:
    """Check the fence, extend the lease and append ``events``; return the run's last seq.

    With no events it is the fence check of a write that extends the lease. ``stamp`` is
    ``now`` as stored, when the caller has it already.
    """
    if stamp is None:
        stamp = to_db(now)
    row = conn.execute(
        "UPDATE agent_runs SET last_seq = last_seq + ?, lease_expires_at = ?, updated_at = ? "
        "WHERE id = ? AND lease_owner = ? AND lease_token = ? "
        "AND status IN ('pending', 'running') RETURNING last_seq",
        (len(events), lease.expiry(now), stamp, lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if row is None:
        raise diagnose(conn, lease.run_id, lease.token)
    last_seq: int = row[0]
    if len(events) == 1:
        kind, payload, call_id = events[0]
        conn.execute(_INSERT, (lease.run_id, last_seq, kind, payload, stamp, call_id))
    elif events:
        first = last_seq - len(events) + 1
        conn.executemany(
            _INSERT,
            [
                (lease.run_id, first + i, kind, payload, stamp, call_id)
                for i, (kind, payload, call_id) in enumerate(events)
            ],
        )
    return last_seq


def append_checked(
    conn: apsw.Connection, now: datetime, items: Sequence[tuple[str, int, Sequence[NewEvent]]]
) -> None:
    """Append events to runs whose fence this transaction already took or checked.

    Each item is (run id, the run's last seq before, events): the caller's conditional
    UPDATE of the run's row (a claim that bumped the token, an attempt settled under its
    token) was the fence and already moved ``last_seq`` by ``len(events)``.
    """
    stamp = to_db(now)
    conn.executemany(
        _INSERT,
        [
            (run_id, before + i + 1, kind, payload, stamp, call_id)
            for run_id, before, events in items
            for i, (kind, payload, call_id) in enumerate(events)
        ],
    )


def insert_run(
    conn: apsw.Connection,
    run_id: str,
    now: datetime,
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
        parent = conn.execute(
            "SELECT app_version FROM agent_runs WHERE id = ?", (parent_id,)
        ).fetchone()
        if parent is None:
            raise RunNotFound(f"the parent run {parent_id!r} does not exist", run_id=run_id)
        if app_version is None:
            app_version = parent[0]
    stamp = to_db(now)
    created = conn.execute(
        "INSERT INTO agent_runs (id, parent_id, spawn_name, name, status, provider, "
        "app_version, config, lease_owner, lease_token, lease_expires_at, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (id) DO NOTHING RETURNING 1",
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
            lease.expiry(now) if lease else None,
            stamp,
            stamp,
        ),
    ).fetchone()
    if created is None:
        return False
    if lease is not None:
        append(conn, lease, now, [transition("pending", "running")])
    return True
