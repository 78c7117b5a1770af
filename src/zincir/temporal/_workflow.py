"""Workflow ``zincir.operation.v1`` and activity ``zincir.execute.v1``.

The workflow takes the invocation (its JSON object form) and the runtime's options, runs the
activity once under the configured retry policy and timeouts, and returns the record's wire
text (see ``_wire``). A large input arrives as a proxy invocation and a large record leaves
as a reference (see ``_content``): the activity resolves and writes them, the workflow only
passes references on. The activity dispatches to the handler registered for (kind,
handler_id) in the worker's ``HandlerRegistry``:

* success, suspension, non-retryable failure: returned as a record;
* retryable failure: raised as a retryable ``ApplicationError`` whose details hold the failure
  record, so Temporal retries it; once the attempts are spent the workflow persists that record;
* a record for another invocation, or no handler: a non-retryable error that fails the
  workflow without a record (fail closed; a later start of the same id runs again).

The workflow sandbox re-imports this module for each run: everything it needs beyond
``temporalio`` is deterministic zincir code, imported as pass-through.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from temporalio import activity, workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    import asyncio

    from .. import _telemetry as telemetry
    from .._errors import (
        ContentMissing,
        DigestMismatch,
        InputDrift,
        InvalidInvocation,
        RecordFormatError,
    )
    from .._validate import printable
    from ..contract import Failure, Invocation, Record
    from ..durable._registry import HandlerRegistry, attempt_outcome
    from ._content import ContentStore, is_proxy, offloaded_record_wire, resolve_input
    from ._wire import DEFAULT_MAX_RECORD_BYTES, encode_wire

__all__ = [
    "ACTIVITY_NAME",
    "FAIL_CLOSED",
    "WORKFLOW_NAME",
    "OperationActivities",
    "OperationWorkflow",
]

WORKFLOW_NAME: Final = "zincir.operation.v1"
ACTIVITY_NAME: Final = "zincir.execute.v1"

FAIL_CLOSED: Final = frozenset(
    {
        "ContentMissing",
        "DigestMismatch",
        "InputDrift",
        "MissingDurableHandler",
        "InvalidInvocation",
    }
)
"""Error types that fail the workflow without persisting a record."""


def _seconds(value: Any) -> timedelta | None:
    return None if value is None else timedelta(seconds=float(value))


def temporal_retry(options: dict[str, Any]) -> TemporalRetryPolicy:
    """The activity retry policy from the options' ``retry`` mapping."""
    spec = options.get("retry") or {}
    return TemporalRetryPolicy(
        initial_interval=_seconds(spec.get("initial_interval", 1.0)) or timedelta(seconds=1),
        backoff_coefficient=float(spec.get("backoff", 2.0)),
        maximum_interval=_seconds(spec.get("maximum_interval")),
        maximum_attempts=int(spec.get("maximum_attempts", 0)),
        non_retryable_error_types=list(spec.get("non_retryable_error_types") or []) or None,
    )


@workflow.defn(name=WORKFLOW_NAME)
class OperationWorkflow:
    """Runs one invocation's activity and returns its record; never re-runs a finished one."""

    @workflow.run
    async def run(self, invocation: dict[str, Any], options: dict[str, Any] | None = None) -> str:
        options = options or {}
        timeouts = options.get("timeouts") or {}
        start_to_close = _seconds(timeouts.get("start_to_close"))
        schedule_to_close = _seconds(timeouts.get("schedule_to_close"))
        if start_to_close is None and schedule_to_close is None:
            start_to_close = timedelta(minutes=10)
        activity_options: dict[str, Any] = {
            "max_record_bytes": int(options.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES))
        }
        if "offload_above" in options:  # records may come back as references (see _content)
            activity_options["offload_above"] = options["offload_above"]
        try:
            result: str = await workflow.execute_activity(
                ACTIVITY_NAME,
                args=[invocation, activity_options],
                result_type=str,
                start_to_close_timeout=start_to_close,
                schedule_to_close_timeout=schedule_to_close,
                schedule_to_start_timeout=_seconds(timeouts.get("schedule_to_start")),
                heartbeat_timeout=_seconds(timeouts.get("heartbeat")),
                retry_policy=temporal_retry(options),
            )
            return result
        except ActivityError as error:
            return _record_after(invocation, error)


def _record_after(invocation: dict[str, Any], error: ActivityError) -> str:
    """The failure record persisted once the activity's attempts are spent."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        if cause.type in FAIL_CLOSED:
            raise ApplicationError(cause.message, type=cause.type, non_retryable=True) from None
        if cause.details and isinstance(cause.details[0], str):
            return cause.details[0]  # the failure record the activity built
        failure = Failure(cause.type or "ActivityFailed", not cause.non_retryable, cause.message)
    elif isinstance(cause, TimeoutError):
        failure = Failure(
            "ActivityTimeout",
            True,
            f"{cause.type.name if cause.type else ''} "
            f"timeout on every attempt: {cause.message}".strip(),
        )
    elif isinstance(cause, CancelledError):
        raise cause
    else:
        failure = Failure(type(cause).__name__ if cause else "ActivityFailed", True, str(error))
    return _failure_wire(invocation, failure)


def _parse_invocation(invocation: dict[str, Any]) -> Invocation:
    """The invocation a workflow or activity received; a malformed one is not retried."""
    try:
        request = Invocation.from_dict(invocation)
        request.validate(max_input_bytes=None)
    except InvalidInvocation as error:
        raise ApplicationError(error.detail, type="InvalidInvocation", non_retryable=True) from None
    return request


def _failure_wire(invocation: dict[str, Any], failure: Failure) -> str:
    """The wire text of a failure record built in the workflow; never fails the task."""
    request = _parse_invocation(invocation)
    message = printable(str(failure.message))[:4000]
    try:
        return encode_wire(
            Record.for_invocation(request, Failure(failure.error, failure.retryable, message))
        )
    except RecordFormatError:  # an error name that is not a stable name
        return encode_wire(
            Record.for_invocation(
                request,
                Failure(
                    "ActivityFailed", failure.retryable, f"{failure.error!r}: {message}"[:4000]
                ),
            )
        )


class OperationActivities:
    """The activity side: dispatches each invocation to a registered handler, never serialized.

    With ``content_store`` an input sent as a content reference is read from it, and a
    record longer than the runtime's threshold is written to it and sent as a reference;
    each attempt's OpenTelemetry span is then a child of the run's stored trace.
    """

    def __init__(
        self, registry: HandlerRegistry, content_store: ContentStore | None = None
    ) -> None:
        self.registry = registry
        self.content_store = content_store

    @activity.defn(name=ACTIVITY_NAME)
    async def execute(
        self, invocation: dict[str, Any], options: dict[str, Any] | None = None
    ) -> str:
        """One attempt: dispatch, then return the record (or raise for Temporal to retry)."""
        options = options or {}
        max_record_bytes = int(options.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES))
        request = sent = _parse_invocation(invocation)
        if is_proxy(sent):
            reading = _start_heartbeat()  # a long input read cold is liveness too
            try:
                request = await resolve_input(self.content_store, sent)
            except ContentMissing as error:
                raise ApplicationError(
                    error.detail, type="ContentMissing", non_retryable=True
                ) from None
            finally:
                if reading is not None:
                    reading.cancel()
        above = options.get("offload_above") if self.content_store is not None else None
        handler = self.registry.get(request.kind, request.handler_id)
        if handler is None:
            raise ApplicationError(
                f"no handler registered for kind {request.kind!s} and handler id "
                f"{request.handler_id!r} on task queue {activity.info().task_queue!r}; "
                "register it with the worker's HandlerRegistry",
                type="MissingDurableHandler",
                non_retryable=True,
            )
        # the span of this real execution: a child of the run's stored trace when the
        # worker has a store, else of the current context (temporalio's TracingInterceptor)
        parent = await telemetry.run_context(self.content_store, request.run_id)
        beat = _start_heartbeat()
        try:
            with telemetry.operation(request, parent) as span:
                outcome = await attempt_outcome(handler, request)
                span.outcome(outcome)
        except (DigestMismatch, InputDrift) as error:
            raise ApplicationError(
                error.detail, type=type(error).__name__, non_retryable=True
            ) from None
        finally:
            if beat is not None:
                beat.cancel()
        wire = await offloaded_record_wire(
            self.content_store,
            sent,  # the record of what Temporal carries: a proxy's holds the reference
            outcome,
            max_record_bytes=max_record_bytes,
            above=None if above is None else int(above),
        )
        if isinstance(outcome, Failure) and outcome.retryable:
            raise ApplicationError(
                (outcome.message or outcome.error)[:1000],
                wire,
                type=outcome.error,
                non_retryable=False,
            )
        return wire


def _start_heartbeat() -> asyncio.Task[None] | None:
    """Heartbeat while the handler runs when a heartbeat timeout is set: it proves liveness."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return None
    interval = max(timeout.total_seconds() / 3, 0.05)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    return asyncio.get_running_loop().create_task(beat())
