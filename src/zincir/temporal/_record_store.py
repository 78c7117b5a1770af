"""Terminal records kept beyond Temporal's retention, in a zincir store's ``operations`` table.

Rows have the shape ``LocalRuntime`` writes for a finished operation: ``status='completed'``,
``outcome`` and ``record`` (the canonical encoded record) set, claim columns NULL, and
``attempts`` 1 (Temporal's workflow history holds the real attempt count). Only a lease
holder writes a run's log, as in ``LocalRuntime``: see :func:`save_record`.
"""

from __future__ import annotations

from .._errors import RecordFormatError, StoreError
from ..contract import Invocation, Record, decode_record, encode_record
from ..durable._operations import new_operation, stored_outcome
from ..store import Lease, OperationKey, Store

__all__ = ["load_record", "save_record"]


def _decode(text: str, run_id: str) -> Record:
    try:
        return decode_record(text)
    except RecordFormatError as error:
        raise type(error)(
            f"the stored record in the operations table is corrupt: {error.detail}",
            run_id=run_id,
        ) from None


async def load_record(store: Store, invocation: Invocation) -> Record | None:
    """The completed record stored for this identity, or None."""
    key = OperationKey(invocation.run_id, invocation.step_id, invocation.sequence)
    row = await store.get_operation(key)
    if row is None or row.status != "completed":
        return None
    if row.record is None:
        raise StoreError(
            f"operations row for {invocation.stable_key()} is completed without a record",
            run_id=invocation.run_id,
        )
    return _decode(row.record, invocation.run_id)


async def save_record(store: Store, record: Record, lease: Lease | None = None) -> Record | None:
    """Store ``record`` as completed unless one is stored; return the stored record.

    Under ``lease`` (the one this process held on the run when the execution started) the
    run's log gets ``operation_completed`` in the same transaction, and a fenced or
    finished run raises FencedOut (RunTerminal) with nothing stored; without one only the
    record is stored. None means the identity is held by an unfinished row for different
    input.
    """
    text = encode_record(record)
    operation = new_operation(record.invocation, record.input_digest)
    stored = await store.save_operation_record(operation, stored_outcome(record, text), lease=lease)
    if stored is None:
        return record
    if stored.status != "completed":
        return None
    if stored.record is None:
        raise StoreError(
            f"operations row for {record.invocation.stable_key()} is completed without a record",
            run_id=record.invocation.run_id,
        )
    return record if stored.record == text else _decode(stored.record, record.invocation.run_id)
