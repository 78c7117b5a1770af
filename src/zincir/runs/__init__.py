"""Runs: AgentContext, leases and fencing, the ResumeWorker and version migrations."""

from ._budget import Budget, BudgetUsage, set_budget
from ._context import AgentContext, Verifier
from ._entries import response_entry, tool_result_entry
from ._fork import fork_run
from ._lease import MIN_LEASE_TTL, Lease
from ._lifecycle import cancel_run, compact_run, prune_runs
from ._spin import SpinRules, acknowledge_spin
from ._types import (
    Checkpoint,
    CheckpointCandidate,
    CheckpointOutcome,
    DurableState,
    PendingCheckpoint,
    ToolCall,
    Verification,
)
from ._versions import VersionMigrations
from ._worker import ResumeWorker
from ._workspace import WorkspaceRevision

__all__ = [
    "MIN_LEASE_TTL",
    "AgentContext",
    "Budget",
    "BudgetUsage",
    "Checkpoint",
    "CheckpointCandidate",
    "CheckpointOutcome",
    "DurableState",
    "Lease",
    "PendingCheckpoint",
    "ResumeWorker",
    "SpinRules",
    "ToolCall",
    "Verification",
    "Verifier",
    "VersionMigrations",
    "WorkspaceRevision",
    "acknowledge_spin",
    "cancel_run",
    "compact_run",
    "fork_run",
    "prune_runs",
    "response_entry",
    "set_budget",
    "tool_result_entry",
]
