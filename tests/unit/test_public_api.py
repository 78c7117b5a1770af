"""The curated public API: a pinned, sorted export list, one error tree, no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import zincir
from tests.conftest import REPO

EXPORTS = [
    "AgentContext",
    "AmbiguousOutcome",
    "ApprovalDecided",
    "ApprovalExpired",
    "ApprovalMismatch",
    "ApprovalNotFound",
    "ApprovalRequired",
    "Budget",
    "BudgetExceeded",
    "BudgetUsage",
    "CallDeferred",
    "Checkpoint",
    "CheckpointCandidate",
    "CheckpointError",
    "CheckpointOutcome",
    "ChildResult",
    "CommandHandler",
    "CommitUncertain",
    "CompactReport",
    "ConnectionLost",
    "ContentMissing",
    "DatabaseCorrupt",
    "DatabaseReadOnly",
    "DigestMismatch",
    "DuplicateToolCall",
    "DurableRuntime",
    "DurableState",
    "Encryption",
    "EncryptionKeyMissing",
    "Event",
    "Failure",
    "FencedOut",
    "HandlerRegistry",
    "InputDrift",
    "InvalidDocument",
    "InvalidInput",
    "InvalidInvocation",
    "InvalidLeaseTtl",
    "InvalidPayload",
    "Invocation",
    "LeaseError",
    "LeaseHeld",
    "LeaseLost",
    "LocalRuntime",
    "MissingDurableHandler",
    "MissingDurableToolsetOrigins",
    "NotAZincirDatabase",
    "NotJsonSerializable",
    "OperationFailed",
    "OperationInProgress",
    "OperationKind",
    "PayloadTampered",
    "PayloadTooLarge",
    "PendingCheckpoint",
    "PruneReport",
    "Queue",
    "RateLimit",
    "ReceivedMessage",
    "Record",
    "RecordFormatError",
    "ResumeWorker",
    "RetryPolicy",
    "RevisionConflict",
    "RunCancelled",
    "RunExists",
    "RunNotFound",
    "RunTerminal",
    "SQLiteStore",
    "SchemaTooNew",
    "SensitiveHeader",
    "SpinDetected",
    "SpinRules",
    "StepInProgress",
    "StoreError",
    "StoreUnavailable",
    "Success",
    "Suspend",
    "SuspendReason",
    "Suspended",
    "ToolCall",
    "ToolPolicy",
    "UnknownField",
    "UnknownToolCall",
    "UnsupportedVersion",
    "Verification",
    "VersionDivergence",
    "VersionMigrations",
    "WorkerError",
    "WorkflowContext",
    "WorkflowSuspended",
    "WorkspaceDrift",
    "WorkspaceRevision",
    "ZincirError",
    "ZincirSignal",
    "acknowledge_spin",
    "cancel_run",
    "compact_run",
    "decode_record",
    "encode_record",
    "fork_run",
    "open_store",
    "prune_runs",
    "send_message",
    "set_budget",
]


def test_exports_are_pinned_and_sorted() -> None:
    assert zincir.__all__ == EXPORTS
    assert zincir.__all__ == sorted(zincir.__all__)
    for name in zincir.__all__:
        assert hasattr(zincir, name), name


def test_every_error_derives_from_the_base() -> None:
    for name in zincir.__all__:
        value = getattr(zincir, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, zincir.ZincirError), name
    assert issubclass(zincir.Suspend, BaseException)
    assert not issubclass(zincir.Suspend, Exception)


def test_errors_carry_the_run_id() -> None:
    error = zincir.FencedOut("stop writing", run_id="run-7")
    assert error.run_id == "run-7" and "run-7" in str(error)


def test_core_import_pulls_no_extra() -> None:
    code = (
        "import sys, zincir; heavy = [m for m in ('temporalio', 'starlette', 'uvicorn', "
        "'jinja2', 'mcp', 'psycopg', 'agents') if m in sys.modules]; print(heavy)"
    )
    output = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "src")},
    ).stdout
    assert output.strip() == "[]"
