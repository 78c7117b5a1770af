"""What the runtimes hand the store for an invocation: its identity and its record's outcome."""

from __future__ import annotations

from typing import Any

from ..contract import Failure, Invocation, OperationKind, Record, Success, Suspended
from ..contract._codec import INPUT_LEFT_OUT
from ..store import NewOperation, OperationKey, OperationOutcome

__all__ = ["new_operation", "stored_outcome"]


def new_operation(invocation: Invocation, digest: str | None = None) -> NewOperation:
    """The identity of ``invocation`` bound to its kind, handler and input digest."""
    return NewOperation(
        key=OperationKey(invocation.run_id, invocation.step_id, invocation.sequence),
        kind=OperationKind(invocation.kind).value,
        handler_id=invocation.handler_id,
        input_digest=invocation.input_digest() if digest is None else digest,
        input_json=invocation.input_json,
    )


def stored_outcome(record: Record, record_json: str) -> OperationOutcome:
    """``record`` (encoded as ``record_json``, whole or with ``null`` for its input) as the
    store keeps it, with the details its ``operation_completed`` event carries."""
    outcome = record.outcome
    left_out = INPUT_LEFT_OUT in record_json
    if isinstance(outcome, Success):
        return OperationOutcome(record_json, "success", {}, left_out)
    if isinstance(outcome, Failure):
        details: dict[str, Any] = {"error": outcome.error, "retryable": outcome.retryable}
        return OperationOutcome(record_json, "failure", details, left_out)
    assert isinstance(outcome, Suspended)
    return OperationOutcome(record_json, "suspended", {"reason": str(outcome.reason)}, left_out)
