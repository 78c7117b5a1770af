"""The one writer of the event log and the one place a run's fence is checked.

Every event of every run is appended by :func:`append` (or :func:`append_checked` for runs
whose row the same transaction has just fenced: a claim, a settled attempt), inside the
caller's write transaction: it checks the lease's owner and token against the run's row,
allocates the next gapless sequence numbers and inserts the events. A fenced owner's
transaction raises before anything is stored. :func:`insert_run` is the one way a run's
row is created.

The lease holder's appends read the run's row and leave it unwritten (one page less to
commit each). The events past the row's ``last_seq`` are then the holder's own (every other
writer of the row catches it up), and every reader and every other writer takes the run's
last seq, update time and lease expiry from :func:`last_seq_sql`, :func:`updated_at_sql`
and :func:`lease_expiry_sql`: those events' when there are any (the newest one's time, and
that time plus the lease's TTL, the expiry a write sets), else the row's.
:func:`caught_up_sql` writes them back into the row wherever another write changes it
anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import apsw

from ..._errors import StoreError
from ..._time import from_db, to_db
from .._content import cut_events
from .._records import Lease, NewEvent
from .._run_rules import fence_error
from .._sql import PLUS_US, lagging_last_seq, lagging_lease_expiry, lagging_updated_at
from ._content import write_rows

__all__ = [
    "append",
    "append_checked",
    "caught_up_sql",
    "check_fence",
    "diagnose",
    "insert_run",
    "last_seq_sql",
    "lease_expiry_sql",
    "register_functions",
    "set_now",
    "ttl_us",
    "updated_at_sql",
]


def _plus_us(*args: apsw.SQLiteValue) -> str | None:
    """``stamp`` plus ``micros`` microseconds, as stored; NULL if either is NULL."""
    stamp, micros = args
    if not isinstance(stamp, str) or not isinstance(micros, int):
        return None
    return to_db(from_db(stamp) + timedelta(microseconds=micros))


_now = threading.local()
"""The ``now`` of the transaction running on this thread, as stored (:func:`set_now`)."""


def set_now(stamp: str) -> None:
    """Make ``zincir_now()`` return ``stamp`` in this thread's next statements: the time of
    the transaction about to run (SQLite runs a connection's statements on its caller's
    thread)."""
    _now.stamp = stamp


def _zincir_now(*_args: apsw.SQLiteValue) -> str:
    stamp: str | None = getattr(_now, "stamp", None)
    if stamp is None:
        raise StoreError("zincir_now() called outside a transaction given a time")
    return stamp


def register_functions(conn: apsw.Connection) -> None:
    """Give ``conn`` the SQL functions the run reads below call, and ``zincir_now()``, the
    clock the statements written once for both backends read (PostgreSQL defines it as the
    server's)."""
    conn.create_scalar_function(PLUS_US, _plus_us, 2, deterministic=True)
    conn.create_scalar_function("zincir_now", _zincir_now, 0, deterministic=False)


last_seq_sql = lagging_last_seq
updated_at_sql = lagging_updated_at
lease_expiry_sql = lagging_lease_expiry


def caught_up_sql(run: str = "agent_runs") -> str:
    """SET clauses that write the run's last seq and lease expiry back into its row (for a
    write that changes the row anyway and keeps its lease)."""
    return f"last_seq = {last_seq_sql(run)}, lease_expires_at = {lease_expiry_sql(run)}"


_INSERT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id, payload_pieces) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
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


_HOLDER = (
    f"SELECT {last_seq_sql('r')} FROM agent_runs AS r WHERE r.id = ? AND r.lease_owner = ? "
    "AND r.lease_token = ? AND r.status IN ('pending', 'running')"
)
_EXTEND = (
    f"UPDATE agent_runs SET last_seq = {last_seq_sql()}, lease_expires_at = ?, updated_at = ? "
    "WHERE id = ? AND lease_owner = ? AND lease_token = ? "
    "AND status IN ('pending', 'running') RETURNING last_seq"
)


def ttl_us(ttl: timedelta) -> int:
    """A lease's TTL in whole microseconds, as the run's row keeps it."""
    return ttl // timedelta(microseconds=1)


def append(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    events: Sequence[NewEvent] = (),
    *,
    stamp: str | None = None,
) -> int:
    """Check the fence and append ``events`` after the run's last seq, extending the lease
    to ``now`` plus its TTL; return the new last seq.

    With events, the run's row is read, not written: the newest event's time is the lease's
    extension (see :func:`lease_expiry_sql`), SQLite runs one write transaction at a time,
    so the seqs read stay free until COMMIT, and the events' primary key refuses one used
    twice. With none, it is the fence check of a write, and the row takes the extension.
    ``stamp`` is ``now`` as stored, when the caller has it already.
    """
    if stamp is None:
        stamp = to_db(now)
    if not events:
        extended = conn.execute(
            _EXTEND, (lease.expiry(now), stamp, lease.run_id, lease.owner, lease.token)
        ).fetchone()
        if extended is None:
            raise diagnose(conn, lease.run_id, lease.token)
        return int(extended[0])
    row = conn.execute(_HOLDER, (lease.run_id, lease.owner, lease.token)).fetchone()
    if row is None:
        raise diagnose(conn, lease.run_id, lease.token)
    last_seq: int = row[0]
    stored, rows = cut_events(events)
    write_rows(conn, lease.run_id, rows)
    if len(stored) == 1:
        kind, payload, call_id, pieces = stored[0]
        conn.execute(_INSERT, (lease.run_id, last_seq + 1, kind, payload, stamp, call_id, pieces))
    else:
        conn.executemany(
            _INSERT,
            [
                (lease.run_id, last_seq + 1 + i, kind, payload, stamp, call_id, pieces)
                for i, (kind, payload, call_id, pieces) in enumerate(stored)
            ],
        )
    return last_seq + len(events)


def append_checked(
    conn: apsw.Connection, now: datetime, items: Sequence[tuple[str, int, Sequence[NewEvent]]]
) -> None:
    """Append events to runs whose fence this transaction already took or checked.

    Each item is (run id, the run's last seq before, events): the caller's conditional
    UPDATE of the run's row (a claim that bumped the token, an attempt settled under its
    token) was the fence and already set ``last_seq`` to :func:`last_seq_sql` plus
    ``len(events)``.
    """
    stamp = to_db(now)
    values: list[tuple[object, ...]] = []
    for run_id, before, events in items:
        stored, rows = cut_events(events)
        write_rows(conn, run_id, rows)
        values.extend(
            (run_id, before + i + 1, kind, payload, stamp, call_id, pieces)
            for i, (kind, payload, call_id, pieces) in enumerate(stored)
        )
    conn.executemany(_INSERT, values)


def insert_run(conn: apsw.Connection, run_id: str, now: datetime, **run: Any) -> bool:
    """:func:`zincir.store._log.insert_run` on ``conn`` at ``now`` (for callers not yet
    written over the rule seam)."""
    from .. import _log
    from ._tx import SqliteTx  # it imports this module

    return _log.insert_run(SqliteTx(conn, now), run_id, **run)
