"""PostgreSQL's append to the event log (``PostgresTx.append``).

The fenced ``UPDATE`` of the run's row checks the lease's owner and token, extends the
lease by the database clock, takes the row lock that orders the run's writers until
COMMIT, and allocates the next gapless sequence numbers; the events then go in as
``store._log.append_checked`` writes them. A fenced owner's transaction raises before
anything is stored. :data:`STEP_RESULT` is the same append done as one statement with a
step's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ..._time import to_db
from .._fence import diagnose
from .._log import append_checked
from .._records import Lease, NewEvent
from .._sql import Params

if TYPE_CHECKING:
    from ._tx import PostgresTx

__all__ = ["STEP_RESULT", "append", "insert_events", "text_time"]

_INSERT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id, payload_pieces) "
    "VALUES (%s, %s, %s, %s, zincir_now(), %s, %s)"
)
_EXTEND = (
    "UPDATE agent_runs SET last_seq = last_seq + %s, "
    "lease_expires_at = zincir_now() + %s::interval, updated_at = zincir_now() "
    "WHERE id = %s AND lease_owner = %s AND lease_token = %s "
    "AND status IN ('pending', 'running') RETURNING last_seq"
)
STEP_RESULT = (
    "WITH run AS ("
    " UPDATE agent_runs SET last_seq = last_seq + 1,"
    " lease_expires_at = zincir_now() + %(ttl)s::interval, updated_at = zincir_now()"
    " WHERE id = %(run)s AND lease_owner = %(owner)s AND lease_token = %(token)s"
    " AND status IN ('pending', 'running') RETURNING last_seq),"
    " step AS ("
    " UPDATE step_claims SET event_seq = (SELECT last_seq FROM run)"
    " WHERE run_id = %(run)s AND name = %(name)s AND event_seq IS NULL"
    " AND claim_owner = %(owner)s AND claim_token = %(token)s AND EXISTS (SELECT 1 FROM run)"
    " RETURNING 1),"
    " event AS ("
    " INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id)"
    " SELECT %(run)s, last_seq, 'step_completed', %(payload)s, zincir_now(), NULL FROM run"
    " RETURNING seq)"
    " SELECT last_seq, CASE WHEN NOT EXISTS (SELECT 1 FROM step)"
    " THEN zincir_fail('step claim released') END FROM run"
)
"""A step's result as one statement (its own transaction): the fenced append of its
``step_completed`` (the run's row locked until COMMIT), which carries the result, and the
claim's pointer to it, all or nothing. No row: the fence failed. ``zincir_fail`` aborts it
all when the claim was released."""


def text_time(value: datetime | None) -> str | None:
    """A timestamptz as the fixed-width UTC text every store's records carry."""
    return None if value is None else to_db(value)


def append(tx: PostgresTx, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
    """Check the fence, extend the lease and append ``events``; return the run's last seq.

    With no events it is the fence check of a write that extends the lease.
    """
    row = tx.conn.execute(
        _EXTEND, (len(events), lease.ttl, lease.run_id, lease.owner, lease.token)
    ).fetchone()
    if row is None:
        raise diagnose(tx, lease.run_id, lease.token)
    last_seq: int = row[0]
    if events:
        append_checked(tx, [(lease.run_id, last_seq - len(events), events)])
    return last_seq


def insert_events(tx: PostgresTx, rows: Sequence[Params]) -> None:
    """Insert event rows (run id, seq, type, payload, tool call id, pieces) at the
    transaction's time, under a fence it already took (``store._log.append_checked``);
    in an encrypted store each payload sealed here."""
    sealer = tx.sealer
    if sealer is not None:
        rows = [
            (run_id, seq, kind, sealer.seal(payload), call, pieces)  # type: ignore[arg-type]
            for run_id, seq, kind, payload, call, pieces in rows
        ]
    if len(rows) == 1:
        tx.conn.execute(_INSERT, rows[0])
    elif rows:
        with tx.conn.cursor() as cursor:
            cursor.executemany(_INSERT, rows)
