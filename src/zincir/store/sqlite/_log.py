"""SQLite's append to the event log, and the SQL functions its statements call.

In an encrypted store both writers here seal each payload themselves (they run on the
connection, not through a statement's ``seals``).

Every fenced event is appended by :func:`append` (``SqliteTx.append``; events under a
fence the transaction already took go through ``store._log.append_checked``), inside the
caller's write transaction: it checks the lease's owner and token against the run's row,
allocates the next gapless sequence numbers and inserts the events. A fenced owner's
transaction raises before anything is stored.

The lease holder's appends read the run's row and leave it unwritten (one page less to
commit each). The events past the row's ``last_seq`` are then the holder's own (every other
writer of the row catches it up), and every reader and every other writer takes the run's
last seq, update time and lease expiry from the ``{last_seq:r}``, ``{updated_at:r}`` and
``{lease_expiry:r}`` fragments (``store/_sql.py``): those events' when there are any (the
newest one's time, and that time plus the lease's TTL, the expiry a write sets), else the
row's. ``{caught_up:r}`` writes them back into the row wherever another write changes it
anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import apsw

from ..._errors import StoreError
from ..._time import from_db, to_db
from .._content import cut_events
from .._content_rows import write_content
from .._fence import diagnose
from .._records import Lease, NewEvent
from .._sql import PLUS_US, Params, lagging_last_seq

if TYPE_CHECKING:
    from ._tx import SqliteTx

__all__ = ["NOW", "append", "insert_events", "register_functions"]


def _plus_us(*args: apsw.SQLiteValue) -> str | None:
    """``stamp`` plus ``micros`` microseconds, as stored; NULL if either is NULL."""
    stamp, micros = args
    if not isinstance(stamp, str) or not isinstance(micros, int):
        return None
    return to_db(from_db(stamp) + timedelta(microseconds=micros))


NOW = threading.local()
"""``NOW.stamp``: the ``now`` of the transaction running on this thread, as stored, which
``zincir_now()`` returns (a ``SqliteTx`` sets it: SQLite runs a connection's statements on
its caller's thread)."""


def _zincir_now(*_args: apsw.SQLiteValue) -> str:
    stamp: str | None = getattr(NOW, "stamp", None)
    if stamp is None:
        raise StoreError("zincir_now() called outside a transaction given a time")
    return stamp


def register_functions(conn: apsw.Connection) -> None:
    """Give ``conn`` the SQL function the run row's fragments call, and ``zincir_now()``, the
    clock the statements written once for both backends read (PostgreSQL defines it as the
    server's)."""
    conn.create_scalar_function(PLUS_US, _plus_us, 2, deterministic=True)
    conn.create_scalar_function("zincir_now", _zincir_now, 0, deterministic=False)


_INSERT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id, payload_pieces) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


_HOLDER = (
    f"SELECT {lagging_last_seq('r')} FROM agent_runs AS r WHERE r.id = ? AND r.lease_owner = ? "
    "AND r.lease_token = ? AND r.status IN ('pending', 'running')"
)
_EXTEND = (
    f"UPDATE agent_runs SET last_seq = {lagging_last_seq()}, lease_expires_at = ?, updated_at = ? "
    "WHERE id = ? AND lease_owner = ? AND lease_token = ? "
    "AND status IN ('pending', 'running') RETURNING last_seq"
)


def append(tx: SqliteTx, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
    """Check the fence and append ``events`` after the run's last seq, extending the lease
    to the transaction's ``now`` plus its TTL; return the new last seq.

    With events, the run's row is read, not written: the newest event's time is the lease's
    extension (see ``{lease_expiry:r}``), SQLite runs one write transaction at a time, so
    the seqs read stay free until COMMIT, and the events' primary key refuses one used
    twice. With none, it is the fence check of a write, and the row takes the extension.
    """
    conn, stamp = tx.conn, tx.stamp_now
    if not events:
        extended = conn.execute(
            _EXTEND, (lease.expiry(tx.now), stamp, lease.run_id, lease.owner, lease.token)
        ).fetchone()
        if extended is None:
            raise diagnose(tx, lease.run_id, lease.token)
        return int(extended[0])
    row = conn.execute(_HOLDER, (lease.run_id, lease.owner, lease.token)).fetchone()
    if row is None:
        raise diagnose(tx, lease.run_id, lease.token)
    last_seq: int = row[0]
    cut, rows = cut_events(events)
    write_content(tx, lease.run_id, rows)
    stored: Sequence[tuple[str, str | bytes, str | None, str | None]] = cut
    sealer = tx.sealer
    if sealer is not None:
        stored = [(kind, sealer.seal(text), call, pieces) for kind, text, call, pieces in cut]
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


def insert_events(tx: SqliteTx, rows: Sequence[Params]) -> None:
    """Insert event rows (run id, seq, type, payload, tool call id, pieces) at the
    transaction's time, under a fence it already took (``store._log.append_checked``)."""
    stamp, sealer = tx.stamp_now, tx.sealer
    values: list[tuple[object, ...]]
    if sealer is not None:
        values = [
            (run_id, seq, kind, sealer.seal(payload), stamp, call, pieces)  # type: ignore[arg-type]
            for run_id, seq, kind, payload, call, pieces in rows
        ]
    else:
        values = [
            (run_id, seq, kind, payload, stamp, call, pieces)
            for run_id, seq, kind, payload, call, pieces in rows
        ]
    if len(values) == 1:
        tx.conn.execute(_INSERT, values[0])
    else:
        tx.conn.executemany(_INSERT, values)
