"""What both backends make of the ``operations`` table: the key and lease values a write
binds, the records a read or a claim returns, and the ``operation_completed`` event."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from .._errors import FencedOut, InvalidInput, RunNotFound, RunTerminal
from .._json import encode_checked
from ._content import ContentIndex
from ._operation_records import NewOperation, OperationKey, OperationOutcome, OperationRow
from ._records import Lease, LogEntry, NewEvent, TimeDecoder, driver_time, optional_time

__all__ = [
    "OPERATION_COLUMNS",
    "OPERATION_SEALED",
    "OPERATION_WIDTH",
    "RecordComposer",
    "check_log_lease",
    "claimed_row",
    "completed_event",
    "fence_holds",
    "key_params",
    "lease_columns",
    "operation_row",
    "record_composer",
]

OPERATION_COLUMNS: Final = (
    "kind, handler_id, input_digest, status, record, claim_owner, claim_expires_at, "
    "attempts, claim_lease_owner, claim_lease_token, "
    "CASE WHEN record IS NULL THEN NULL ELSE input_json END, input_parts"
)
"""The ``operations`` columns :func:`operation_row` reads, in order (the stored input only
where there is a record to compose)."""
OPERATION_WIDTH: Final = 12
"""How many columns :data:`OPERATION_COLUMNS` selects."""
OPERATION_SEALED: Final = (4, 10, 11)
"""The positions in :data:`OPERATION_COLUMNS` of the record and the input (sealed)."""

RecordComposer = Callable[[str | None, str, str | None, tuple[str, str, str]], str | None]
"""Composes a row's canonical record from its ``record``, ``input_json`` and
``input_parts`` columns and its (kind, handler id, input digest)
(:meth:`._content.ContentIndex.compose_record`, bound to a read and the row's key)."""


def record_composer(
    content: ContentIndex,
    read: Callable[[Sequence[str]], Mapping[str, str]],
    key: OperationKey,
    *,
    whole: bool,
) -> RecordComposer:
    """The :data:`RecordComposer` of ``key``'s row read through ``read``: its canonical
    record whole, or (``whole`` False, a replay's read) with its input left as stored."""
    head = key_params(key)
    if whole:
        return lambda record, text, parts, row: content.compose_record(
            record, text, parts, read, (*head, *row)
        )
    return lambda record, text, parts, row: content.compose_output(record, read, (*head, *row))


def key_params(key: OperationKey) -> tuple[str, str, int]:
    """The (run_id, step_id, sequence) values that select an identity's row."""
    return (key.run_id, key.step_id, key.sequence)


def lease_columns(lease: Lease | None) -> tuple[str | None, int | None]:
    """The claim_lease_owner and claim_lease_token of a write made under ``lease``."""
    return (None, None) if lease is None else (lease.owner, lease.token)


def operation_row(
    row: Sequence[Any],
    *,
    fenced: bool,
    compose: RecordComposer,
    time: TimeDecoder = driver_time,
) -> OperationRow:
    """A row selected as :data:`OPERATION_COLUMNS`, its claim judged ``fenced`` and its
    record composed whole."""
    kind, handler_id, digest, status, record, owner, expires, attempts = row[:8]
    lease_owner, lease_token, input_json, input_parts = row[8:12]
    record = compose(record, input_json or "", input_parts, (kind, handler_id, digest))
    return OperationRow(
        kind=kind,
        handler_id=handler_id,
        input_digest=digest,
        status=status,
        record=record,
        claim_owner=owner,
        claim_expires_at=optional_time(expires, time),
        attempts=int(attempts),
        claim_lease_owner=lease_owner,
        claim_lease_token=None if lease_token is None else int(lease_token),
        claim_fenced=fenced,
    )


def claimed_row(
    operation: NewOperation,
    owner: str,
    expires: datetime | None,
    attempts: int,
    lease: Lease | None,
) -> OperationRow:
    """The row a successful claim of ``operation`` by ``owner`` leaves (until ``expires``)."""
    lease_owner, lease_token = lease_columns(lease)
    return OperationRow(
        kind=operation.kind,
        handler_id=operation.handler_id,
        input_digest=operation.input_digest,
        status="claimed",
        record=None,
        claim_owner=owner,
        claim_expires_at=expires,
        attempts=attempts,
        claim_lease_owner=lease_owner,
        claim_lease_token=lease_token,
    )


def completed_event(operation: NewOperation, outcome: OperationOutcome, attempts: int) -> NewEvent:
    """The ``operation_completed`` event of a stored record."""
    payload: dict[str, Any] = {
        "step_id": operation.key.step_id,
        "sequence": operation.key.sequence,
        "kind": operation.kind,
        "handler_id": operation.handler_id,
        "outcome": outcome.outcome,
        "input_digest": operation.input_digest,
        "attempts": attempts,
        **outcome.details,
    }
    return NewEvent("operation_completed", encode_checked(payload))


def check_log_lease(operation: NewOperation, log: Sequence[LogEntry], lease: Lease | None) -> None:
    """InvalidInput for log entries offered without the run's lease."""
    if log and lease is None:
        raise InvalidInput(
            "log entries need the run's lease: only its holder writes the log",
            run_id=operation.key.run_id,
        )


def fence_holds(check_fence: Callable[[], None]) -> bool:
    """Whether ``check_fence`` (a backend's fence check of one lease) passes: False for the
    errors of a lease that no longer holds its run."""
    try:
        check_fence()
    except (FencedOut, RunNotFound, RunTerminal):
        return False
    return True
