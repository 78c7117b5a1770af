"""Terminal records kept beyond Temporal's retention, in a zincir store's ``operations`` table.

Rows have the shape ``LocalRuntime`` writes for a finished operation: ``status='completed'``,
``outcome`` and ``record`` (the canonical encoded record) set, claim columns NULL, and
``attempts`` 1 (Temporal's workflow history holds the real attempt count).
"""

from __future__ import annotations

from typing import Any

from .._errors import RecordFormatError, StoreError
from ..contract import OperationKind, Record, decode_record, encode_record
from ..durable._local import append_operation_event

__all__ = ["load_record", "save_record"]

_OUTCOMES = {"Success": "success", "Failure": "failure", "Suspended": "suspended"}
_WHERE = "run_id = ? AND step_id = ? AND sequence = ?"


def _key(record_or_invocation: Any) -> tuple[str, str, int]:
    return (
        record_or_invocation.run_id,
        record_or_invocation.step_id,
        record_or_invocation.sequence,
    )


def _decode(text: str, run_id: str) -> Record:
    try:
        return decode_record(text)
    except RecordFormatError as error:
        raise type(error)(
            f"the stored record in the operations table is corrupt: {error.detail}",
            run_id=run_id,
        ) from None


async def load_record(store: Any, run_id: str, step_id: str, sequence: int) -> Record | None:
    """The completed record stored for this identity, or None."""

    def query(conn: Any) -> str | None:
        row = conn.execute(
            "SELECT record FROM operations WHERE run_id = ? AND step_id = ? AND sequence = ? "
            "AND status = 'completed'",
            (run_id, step_id, sequence),
        ).fetchone()
        return None if row is None else row[0]

    text = await store.read(query)
    if text is None:
        return None
    if not isinstance(text, str):
        raise StoreError(
            f"operations row for {run_id}/{step_id}/{sequence} is completed without a record",
            run_id=run_id,
        )
    return _decode(text, run_id)


async def save_record(store: Any, record: Record) -> Record | None:
    """Store ``record`` as completed unless one is stored; return the stored record.

    Like LocalRuntime, a new row also appends ``operation_completed`` to the run's event
    log when the run exists. None means the identity is held by an unfinished row for
    different input.
    """
    text = encode_record(record)
    invocation = record.invocation
    outcome = _OUTCOMES[type(record.outcome).__name__]

    def write(conn: Any) -> str | None:
        row = conn.execute(
            f"SELECT status, record, input_digest FROM operations WHERE {_WHERE}",
            _key(invocation),
        ).fetchone()
        if row is not None and row[0] == "completed":
            return None if row[1] is None else str(row[1])
        if row is not None and row[2] != record.input_digest:
            return None
        stamp = store.now()
        if row is None:
            conn.execute(
                "INSERT INTO operations (run_id, step_id, sequence, kind, handler_id, "
                "input_digest, input_json, status, outcome, record, claim_owner, "
                "claim_expires_at, attempts, created_at, updated_at, completed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'completed', ?, ?, NULL, NULL, 1, ?, ?, ?)",
                (*_key(invocation), OperationKind(invocation.kind).value,
                 invocation.handler_id, record.input_digest, invocation.input_json, outcome,
                 text, stamp, stamp, stamp),
            )
        else:
            conn.execute(
                "UPDATE operations SET status = 'completed', outcome = ?, record = ?, "
                "claim_owner = NULL, claim_expires_at = NULL, updated_at = ?, "
                f"completed_at = ? WHERE {_WHERE}",
                (outcome, text, stamp, stamp, *_key(invocation)),
            )
        append_operation_event(conn, record, outcome, 1, stamp)
        return text

    stored = await store.write(write)
    if stored is None:
        return None
    return record if stored == text else _decode(stored, invocation.run_id)
