"""Every error zincir raises, in one tree.

    ZincirError
    ├── InvalidInput                 bad argument from the caller; nothing stored
    │   ├── InvalidLeaseTtl
    │   ├── InvalidInvocation
    │   ├── InvalidDocument          a payload document that fails strict validation
    │   │   └── SensitiveHeader
    │   ├── NotJsonSerializable
    │   └── PayloadTooLarge
    ├── StoreError                   the database could not do what was asked
    │   ├── StoreUnavailable         transient: locked past the busy timeout, I/O, disk full
    │   │   └── ConnectionLost       the database server's connection broke (PostgreSQL)
    │   ├── DatabaseCorrupt          damaged pages: restore from a backup
    │   ├── DatabaseReadOnly         the file or its folder cannot be written
    │   ├── SchemaTooNew
    │   ├── NotAZincirDatabase       missing, not SQLite, or another application's database
    │   ├── ContentMissing           a content reference names content the store lacks
    │   ├── EncryptionKeyMissing     a sealed value names a key not given (or none was given)
    │   └── PayloadTampered          a sealed value failed its authentication
    ├── RunNotFound
    ├── RunExists
    ├── RunTerminal
    │   └── RunCancelled             the run was cancelled; its owner must stop
    ├── LeaseError
    │   ├── LeaseHeld                another owner's lease is live
    │   ├── LeaseLost                our heartbeat failed; renew by recovering
    │   └── FencedOut                a newer owner holds the run
    ├── DuplicateToolCall
    ├── UnknownToolCall
    ├── BudgetExceeded               the run's budget stops its next action
    ├── SpinDetected                 the run loops without progress
    ├── CheckpointError
    │   └── WorkspaceDrift           the workspace differs from the accepted checkpoint's
    ├── StepInProgress
    ├── RevisionConflict
    ├── RecordFormatError
    │   ├── UnknownField
    │   ├── UnsupportedVersion
    │   ├── InvalidPayload
    │   ├── AmbiguousOutcome
    │   └── DigestMismatch
    ├── InputDrift
    ├── VersionDivergence            new code asks for work the run never recorded; nothing ran
    ├── MissingDurableHandler
    ├── MissingDurableToolsetOrigins
    ├── ApprovalMismatch             a decision does not bind the arguments that would run
    ├── ApprovalNotFound             no paused call waits under that approval id
    ├── ApprovalDecided              the approval already has its (single-use) decision
    ├── ApprovalExpired              the approval expired before its decision: the call is denied
    ├── OperationFailed              raised by a handler to persist a failure record
    │   ├── RetryTool                raised by a tool: run the call again after a durable delay
    │   └── McpInputRoundsExceeded   an MCP server asked for input past max_round_trips
    ├── OperationInProgress
    └── WorkerError

    ZincirSignal (BaseException)     control flow that user code must not swallow
    ├── Suspend                      raised by a handler to persist a suspension record
    ├── ApprovalRequired             raised by a tool: pause the run until the call is approved
    ├── CallDeferred                 raised by a tool: pause the run for an external result
    └── WorkflowSuspended            a workflow wait was persisted; the handler should exit

Every error takes a keyword-only ``run_id`` and shows it in its message.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "AmbiguousOutcome",
    "ApprovalDecided",
    "ApprovalExpired",
    "ApprovalMismatch",
    "ApprovalNotFound",
    "ApprovalRequired",
    "BudgetExceeded",
    "CallDeferred",
    "CheckpointError",
    "CommitUncertain",
    "ConnectionLost",
    "ContentMissing",
    "DatabaseCorrupt",
    "DatabaseReadOnly",
    "DigestMismatch",
    "DuplicateToolCall",
    "EncryptionKeyMissing",
    "FencedOut",
    "InputDrift",
    "InvalidDocument",
    "InvalidInput",
    "InvalidInvocation",
    "InvalidLeaseTtl",
    "InvalidPayload",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "MissingDurableHandler",
    "MissingDurableToolsetOrigins",
    "NotAZincirDatabase",
    "NotJsonSerializable",
    "OperationFailed",
    "OperationInProgress",
    "PayloadTampered",
    "PayloadTooLarge",
    "RecordFormatError",
    "RetryTool",
    "RevisionConflict",
    "RunCancelled",
    "RunExists",
    "RunNotFound",
    "RunTerminal",
    "SchemaTooNew",
    "SensitiveHeader",
    "SpinDetected",
    "StepInProgress",
    "StoreError",
    "StoreUnavailable",
    "Suspend",
    "UnknownField",
    "UnknownToolCall",
    "UnsupportedVersion",
    "VersionDivergence",
    "WorkerError",
    "WorkflowSuspended",
    "WorkspaceDrift",
    "ZincirError",
    "ZincirSignal",
]


class ZincirError(Exception):
    """Base of every zincir error; ``run_id`` names the run where there is one."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        self.run_id = run_id
        self.detail = message
        super().__init__(f"[run {run_id}] {message}" if run_id is not None else message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__))


def _rebuild(cls: type[BaseException], state: dict[str, Any]) -> BaseException:
    """Unpickle an error without calling its __init__ (subclasses take other arguments)."""
    error = cls.__new__(cls)
    error.__dict__.update(state)
    message = state.get("detail", "")
    run_id = state.get("run_id")
    error.args = (f"[run {run_id}] {message}" if run_id is not None else message,)
    return error


class InvalidInput(ZincirError, ValueError):
    """An argument is malformed; nothing was stored."""


class InvalidLeaseTtl(InvalidInput):
    """A lease TTL below the 30 ms floor (or not a duration)."""


class InvalidInvocation(InvalidInput):
    """An invocation fails validation (ids, sequence, input document, size)."""


class InvalidDocument(InvalidInput):
    """A payload document fails strict validation."""


class SensitiveHeader(InvalidDocument):
    """A payload would carry a credential header; configure it on the transport instead."""


class NotJsonSerializable(InvalidInput):
    """A value that must be stored as JSON cannot be encoded."""


class PayloadTooLarge(InvalidInput):
    """A payload exceeds its configured size bound."""


class StoreError(ZincirError):
    """The database failed or is not usable."""


class StoreUnavailable(StoreError):
    """A transient failure (a lock held past the busy timeout, an I/O error, a full disk);
    nothing of the failed write was stored and it may be tried again."""


class CommitUncertain(StoreUnavailable):
    """The disk failed while COMMIT made a SQLite write durable (an fsync error): the write
    may or may not be stored, and a restart may find it. zincir's writes are fenced and
    keyed, so re-reading (or repeating the call through the same API) is safe."""


class ConnectionLost(StoreUnavailable):
    """The connection to the database server broke or the server went away. A write whose
    COMMIT was in flight may or may not be stored: zincir's writes are fenced and keyed, so
    re-reading (or repeating the step through the same API) is safe."""


class DatabaseCorrupt(StoreError):
    """The database file is damaged; restore it from a backup (``PRAGMA integrity_check``)."""


class DatabaseReadOnly(StoreError):
    """The database (or its folder) cannot be written; fix its permissions or mount."""


class SchemaTooNew(StoreError):
    """The database was migrated by a newer zincir than this one."""


class NotAZincirDatabase(StoreError):
    """The file is missing, is not SQLite, or holds another application's tables."""


class ContentMissing(StoreError):
    """Content a reference names (by its SHA-256) is not in the store, or not what the
    reference says: the sides use different stores, or the run's content was pruned."""


class EncryptionKeyMissing(StoreError):
    """The store holds values sealed with a key that was not given (``key_id`` names it),
    or an encrypted database was opened without ``encryption=``."""

    def __init__(self, message: str, *, key_id: str | None = None, run_id: str | None = None):
        self.key_id = key_id
        super().__init__(message, run_id=run_id)


class PayloadTampered(StoreError):
    """A sealed value failed its authentication: a byte of it changed, the key given under
    its id is not the key that sealed it, or a plain value sits where a sealed one belongs."""


class RunNotFound(ZincirError, LookupError):
    """No run has this id."""


class RunExists(ZincirError):
    """A run with this id already exists; recover it instead of creating it."""


class RunTerminal(ZincirError):
    """The run is completed, failed or cancelled; it cannot be recovered or written."""


class RunCancelled(RunTerminal):
    """The run was cancelled (``zincir runs cancel`` or :func:`zincir.cancel_run`); the
    process that held it must stop: nothing more of it is stored."""


class LeaseError(ZincirError):
    """Base of the lease and fencing errors."""


class LeaseHeld(LeaseError):
    """Another owner's lease on the run is live; wait for expiry or force_recover."""


class LeaseLost(LeaseError):
    """A heartbeat could not renew the lease; this context must stop writing."""


class FencedOut(LeaseError):
    """A newer owner took the run; this context's writes are rejected."""


class DuplicateToolCall(ZincirError):
    """A tool call id repeats within a response or already has an intent."""


class UnknownToolCall(ZincirError, LookupError):
    """A tool result names a call id with no recorded intent."""


class CheckpointError(ZincirError):
    """A checkpoint cannot be proposed or decided in the run's current state."""


class StepInProgress(ZincirError):
    """A step is claimed by a live or unrecovered context."""


class RevisionConflict(ZincirError):
    """A restart checkpoint save is stale or diverges at the same revision."""


class RecordFormatError(ZincirError):
    """A stored or received record cannot be decoded."""


class UnknownField(RecordFormatError):
    """A record holds a field this version does not define."""


class UnsupportedVersion(RecordFormatError):
    """A record's version is not one this code reads."""


class InvalidPayload(RecordFormatError):
    """A record is malformed: bad JSON, wrong types or an invalid document."""


class AmbiguousOutcome(RecordFormatError):
    """A record holds zero or several outcomes."""


class DigestMismatch(RecordFormatError):
    """A record's input digest does not match its invocation's input."""


class InputDrift(ZincirError):
    """A known invocation identity arrived with a different input digest."""


class VersionDivergence(ZincirError):
    """The code asked for a step or an operation the run never recorded while recorded work
    it has not replayed yet remains: the run was started by other code (a renamed step, one
    added in the middle). Raised before anything is claimed or run.

    ``position`` is the index in the run's recorded work (steps and operations in log order)
    of ``recorded``, the first item not replayed, e.g. ``step 'fetch'`` or
    ``operation tool.call #1000``; ``attempted`` is what the code asked for instead.
    """

    def __init__(self, *, run_id: str, position: int, recorded: str, attempted: str) -> None:
        self.position = position
        self.recorded = recorded
        self.attempted = attempted
        super().__init__(
            f"the code asked for {attempted}, which this run never recorded, while its "
            f"recorded {recorded} (position {position} of its recorded work) was not replayed "
            "yet: the run was started by other code; finish it on that code, or branch with "
            "patched()",
            run_id=run_id,
        )


class BudgetExceeded(ZincirError):
    """The run's budget stops its next action: ``exceeded`` names the limits, ``budget`` and
    ``usage`` are the ones in force (a paused run resumes once its budget is raised)."""

    def __init__(self, budget: Any, usage: Any, exceeded: list[str], *, run_id: str) -> None:
        self.budget = budget
        self.usage = usage
        self.exceeded = exceeded
        spent, limits = usage.to_dict(), budget.to_dict()
        keys = [_BUDGET_KEYS.get(name, name) for name in exceeded]
        detail = ", ".join(f"{key} {spent[key]} of {limits[key]}" for key in keys)
        then = "it fails" if budget.on_exceed == "fail" else "paused until its budget is raised"
        super().__init__(f"the run's budget is spent ({detail}); {then}", run_id=run_id)


_BUDGET_KEYS = {"wall_time": "wall_time_s"}


class SpinDetected(ZincirError):
    """The run loops without progress: ``rule`` is the one it broke (``repeated_call``,
    ``repeated_response``, ``rounds_without_checkpoint``), ``evidence`` what showed it."""

    def __init__(self, rule: str, finding: str, evidence: dict[str, Any], *, run_id: str) -> None:
        self.rule = rule
        self.finding = finding
        self.evidence = evidence
        shown = ", ".join(f"{key} {value}" for key, value in evidence.items())
        super().__init__(f"the run is spinning: {rule} ({shown})", run_id=run_id)


class WorkspaceDrift(CheckpointError):
    """The workspace no longer holds what the run's latest accepted checkpoint recorded:
    ``changed``, ``added`` and ``removed`` name the paths that differ (relative to it)."""

    @property
    def paths(self) -> list[str]:
        """Every path that differs, sorted."""
        return sorted([*self.changed, *self.added, *self.removed])

    def __init__(
        self,
        accepted: str,
        current: str,
        changed: list[str],
        added: list[str],
        removed: list[str],
        *,
        run_id: str,
    ) -> None:
        self.accepted = accepted
        self.current = current
        self.changed = changed
        self.added = added
        self.removed = removed
        paths = self.paths
        shown = ", ".join(paths[:10]) + (" …" if len(paths) > 10 else "")
        super().__init__(
            f"the workspace is at {current}, not at the accepted checkpoint's {accepted}: "
            f"{len(changed)} changed, {len(added)} added, {len(removed)} removed ({shown}); "
            "restore it (e.g. git checkout) or checkpoint the new state before resuming",
            run_id=run_id,
        )


class MissingDurableHandler(ZincirError, LookupError):
    """No handler is registered for (kind, handler_id) and no record exists."""


class MissingDurableToolsetOrigins(ZincirError):
    """A dynamic toolset does not declare the origins of its tools."""


class ApprovalMismatch(ZincirError):
    """A decision does not bind the arguments that would run, or conflicts with the one on
    record; nothing was run or stored. Fetch the current paused run and decide again."""


class ApprovalNotFound(ZincirError, LookupError):
    """No paused call is waiting under this approval id."""


class ApprovalDecided(ZincirError):
    """The approval already has its decision; a decision is used once."""


class ApprovalExpired(ZincirError):
    """The approval passed its expiry before a decision arrived; the call is denied."""


class OperationFailed(ZincirError):
    """Raised by a handler: persist a failure record with this stable error name."""

    def __init__(
        self,
        error: str,
        retryable: bool = False,
        message: str = "",
        *,
        run_id: str | None = None,
    ) -> None:
        self.error = error
        self.retryable = retryable
        self.message = message
        text = f"operation failed: {error}" + (f": {message}" if message else "")
        super().__init__(text, run_id=run_id)


class RetryTool(OperationFailed):
    """Raised by a tool function: run the call again after a durable full-jitter delay (at
    least ``delay`` seconds), up to the agent's ``tool_retry`` policy; after the last
    attempt the error is reported to the model (or fails the run with
    ``tool_errors="fail"``).

    Its failure record (``RetryTool``) is not retryable for the runtime, whose own
    immediate attempts would not wait the delay: the agent loop retries it, through a
    ``retry.delay`` timer that a crash during the wait does not lose.
    """

    def __init__(self, reason: str = "", *, delay: timedelta | float | None = None) -> None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if seconds is not None and (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds < float("inf")
        ):
            raise InvalidInput(f"delay must be a duration of zero or more, not {delay!r}")
        self.reason = reason
        self.retry_after = None if seconds is None else float(seconds)
        # The persisted failure keeps only its message: the floor travels in it.
        floor = "" if seconds is None else f" (Retry-After: {seconds:g} s)"
        super().__init__("RetryTool", False, f"{reason or 'the tool asked to be retried'}{floor}")


class OperationInProgress(ZincirError):
    """Another process holds a live claim on this invocation."""


class WorkerError(ZincirError):
    """A worker or handler could not be loaded or run."""


class ZincirSignal(BaseException):
    """Control flow raised through user code; derives from BaseException so it is not swallowed."""


class Suspend(ZincirSignal):
    """Raised by a handler: persist a suspension (approval, external_tool, provider_resume)."""

    def __init__(self, reason: str, state: Any = None, *, state_version: int = 1) -> None:
        self.reason = reason
        self.state = state
        self.state_version = state_version
        super().__init__(f"suspended: {reason}")


class WorkflowSuspended(ZincirSignal):
    """Raised by a wait in ``suspend_waits`` mode: the wait is persisted, the handler exits.

    A ResumeWorker treats it as a normal return and dispatches the run again once the wait
    is satisfied (timer due, message arrived, child terminal).
    """

    def __init__(self, run_id: str, kind: str, ref: str, until: datetime | None) -> None:
        self.run_id = run_id
        self.kind = kind
        self.ref = ref
        self.until = until
        deadline = f" until {until.isoformat()}" if until is not None else ""
        super().__init__(f"[run {run_id}] suspended on {kind} {ref!r}{deadline}")


class ApprovalRequired(ZincirSignal):
    """Raised by a tool function: the run pauses until the call is approved (or denied)."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(f"approval required{': ' + reason if reason else ''}")


class CallDeferred(ZincirSignal):
    """Raised by a tool function: the run pauses until an external result is supplied."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(f"call deferred{': ' + reason if reason else ''}")


class McpInputRoundsExceeded(OperationFailed):
    """An MCP server asked for input more rounds than the request's ``max_round_trips``;
    the failure is recorded, so the same run id fails the same way."""
