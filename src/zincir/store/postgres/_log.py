"""The one writer of the event log and the one place a run's fence is checked (PostgreSQL).

Every event of every run is appended by :func:`append` (or :func:`append_checked` for runs
whose row the same transaction has just fenced) inside the caller's write transaction: the
fenced ``UPDATE`` of the run's row checks the lease's owner and token, extends the lease by
the database clock, takes the row lock that orders the run's writers until COMMIT, and
allocates the next gapless sequence numbers. A fenced owner's transaction raises before
anything is stored. :func:`insert_run` is the one way a run's row is created.
:data:`STEP_RESULT` is the same append done as one statement with a step's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..._time import to_db
from .._content import cut_events
from .._records import RUN_COLUMNS, Lease, NewEvent, RunRecord
from .._run_rules import fence_error
from ._base import Conn
from ._content import write_rows

__all__ = [
    "RUN_SELECT",
    "STEP_RESULT",
    "append",
    "append_checked",
    "check_fence",
    "diagnose",
    "insert_run",
    "run_record",
    "text_time",
]

RUN_SELECT = f"SELECT {', '.join(RUN_COLUMNS)} FROM agent_runs"
"""The columns of a :class:`RunRecord`, in order (convert a row with :func:`run_record`)."""

_INSERT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id, payload_pieces) "
    "VALUES (%s, %s, %s, %s, zincir_now(), %s, %s)"
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

_TIMES = frozenset(
    ("lease_expires_at", "next_attempt_at", "wait_until", "created_at", "updated_at")
)


def text_time(value: datetime | None) -> str | None:
    """A timestamptz as the fixed-width UTC text every store's records carry."""
    return None if value is None else to_db(value)


def run_record(row: Sequence[object]) -> RunRecord:
    """An ``agent_runs`` row (selected by :data:`RUN_SELECT`) as a RunRecord."""
    record = {
        column: text_time(value) if column in _TIMES else value  # type: ignore[arg-type]
        for column, value in zip(RUN_COLUMNS, row, strict=True)
    }
    return record  # type: ignore[return-value]


def diagnose(conn: Conn, run_id: str, token: int) -> Exception:
    """Why a fenced write matched no row: missing run, terminal run, or a newer owner."""
    row = conn.execute(
        "SELECT status, lease_token FROM agent_runs WHERE id = %s", (run_id,)
    ).fetchone()
    return fence_error(run_id, token, row)


def check_fence(conn: Conn, lease: Lease) -> None:
    """Raise unless ``lease`` still owns its live run, holding the run's row lock until
    COMMIT (so no new owner can take it meanwhile); for writes that leave the row alone."""
    held = conn.execute(
        "SELECT 1 FROM agent_runs WHERE id = %s AND lease_owner = %s AND lease_token = %s "
        "AND status IN ('pending', 'running') FOR SHARE",
        (lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if held is None:
        raise diagnose(conn, lease.run_id, lease.token)


def append(conn: Conn, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
    """Check the fence, extend the lease and append ``events``; return the run's last seq.

    With no events it is the fence check of a write that extends the lease.
    """
    row = conn.execute(
        "UPDATE agent_runs SET last_seq = last_seq + %s, "
        "lease_expires_at = zincir_now() + %s::interval, updated_at = zincir_now() "
        "WHERE id = %s AND lease_owner = %s AND lease_token = %s "
        "AND status IN ('pending', 'running') RETURNING last_seq",
        (len(events), lease.ttl, lease.run_id, lease.owner, lease.token),
    ).fetchone()
    if row is None:
        raise diagnose(conn, lease.run_id, lease.token)
    last_seq: int = row[0]
    if events:
        append_checked(conn, [(lease.run_id, last_seq - len(events), events)])
    return last_seq


def append_checked(conn: Conn, items: Sequence[tuple[str, int, Sequence[NewEvent]]]) -> None:
    """Append events to runs whose fence this transaction already took or checked.

    Each item is (run id, the run's last seq before, events): the caller's conditional
    UPDATE of the run's row was the fence and already moved ``last_seq`` by ``len(events)``.
    """
    rows: list[tuple[object, ...]] = []
    for run_id, before, events in items:
        stored, pieces_rows = cut_events(events)
        write_rows(conn, run_id, pieces_rows)
        rows.extend(
            (run_id, before + i + 1, kind, payload, call_id, pieces)
            for i, (kind, payload, call_id, pieces) in enumerate(stored)
        )
    if len(rows) == 1:
        conn.execute(_INSERT, rows[0])
    elif rows:
        with conn.cursor() as cursor:
            cursor.executemany(_INSERT, rows)


def insert_run(conn: Conn, run_id: str, **run: Any) -> bool:
    """:func:`zincir.store._log.insert_run` on ``conn`` (for callers not yet written over
    the rule seam)."""
    from .. import _log
    from ._tx import PostgresTx  # it imports this module

    return _log.insert_run(PostgresTx(conn), run_id, **run)
