"""Value types of the bring-your-own-loop API (tool calls, checkpoints, durable state)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._errors import InvalidInput
from .._validate import check_id
from ..store import Event
from ._workspace import WorkspaceRevision

__all__ = [
    "Checkpoint",
    "CheckpointCandidate",
    "CheckpointOutcome",
    "DurableState",
    "PendingCheckpoint",
    "ToolCall",
    "Verification",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call requested by the model; ``id`` is the tool's idempotency key."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def coerce(cls, value: ToolCall | Mapping[str, Any], *, run_id: str | None = None) -> ToolCall:
        """Accept a ToolCall or a mapping with ``id``, ``name`` and ``arguments``."""
        if isinstance(value, ToolCall):
            call = value
        elif isinstance(value, Mapping):
            unknown = set(value) - {"id", "name", "arguments"}
            if unknown or "id" not in value or "name" not in value:
                raise InvalidInput(
                    "a tool call mapping needs exactly the keys id, name and arguments "
                    f"(got {sorted(value)})",
                    run_id=run_id,
                )
            call = cls(value["id"], value["name"], value.get("arguments", {}))
        else:
            raise InvalidInput(
                f"tool calls must be ToolCall or mappings, not {type(value).__name__}",
                run_id=run_id,
            )
        check_id(call.id, "a tool call id", run_id=run_id)
        check_id(call.name, f"the name of tool call {call.id!r}", run_id=run_id)
        if not isinstance(call.arguments, Mapping):
            raise InvalidInput(f"tool call {call.id!r}: arguments must be a dict", run_id=run_id)
        return call

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class CheckpointCandidate:
    """Verified progress proposed by the executor: what is done, what remains, and proof."""

    completed: Sequence[Any] = ()
    remaining: Sequence[Any] = ()
    artifacts: Sequence[Any] = ()
    failed_attempts: Sequence[Any] = ()
    evidence: Any = None
    workspace: WorkspaceRevision | None = None
    """Set by zincir when checkpointing with ``workspace=``: what the folder really holds."""

    @classmethod
    def coerce(
        cls, value: CheckpointCandidate | Mapping[str, Any], *, run_id: str | None = None
    ) -> CheckpointCandidate:
        """Accept a CheckpointCandidate or a mapping with its field names."""
        if isinstance(value, CheckpointCandidate):
            return value
        if not isinstance(value, Mapping):
            raise InvalidInput(
                "a checkpoint candidate must be a CheckpointCandidate or a mapping, "
                f"not {type(value).__name__}",
                run_id=run_id,
            )
        unknown = set(value) - {
            "completed",
            "remaining",
            "artifacts",
            "failed_attempts",
            "evidence",
        }
        if unknown:
            raise InvalidInput(
                f"unknown checkpoint candidate fields: {sorted(unknown)}", run_id=run_id
            )
        return cls(**value)

    def to_json(self) -> dict[str, Any]:
        body = {
            "completed": list(self.completed),
            "remaining": list(self.remaining),
            "artifacts": list(self.artifacts),
            "failed_attempts": list(self.failed_attempts),
            "evidence": self.evidence,
        }
        if self.workspace is not None:
            body["workspace"] = self.workspace.to_json()
        return body

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckpointCandidate:
        workspace = data.get("workspace")
        return cls(
            completed=tuple(data.get("completed", ())),
            remaining=tuple(data.get("remaining", ())),
            artifacts=tuple(data.get("artifacts", ())),
            failed_attempts=tuple(data.get("failed_attempts", ())),
            evidence=data.get("evidence"),
            workspace=None if workspace is None else WorkspaceRevision.from_json(workspace),
        )


@dataclass(frozen=True, slots=True)
class Verification:
    """A verifier's decision on a candidate, with the evidence it relied on."""

    passed: bool
    evidence: Any = None


@dataclass(frozen=True, slots=True)
class CheckpointOutcome:
    """What ``checkpoint()`` decided."""

    accepted: bool
    checkpoint_id: int
    round: int
    evidence: Any = None


@dataclass(frozen=True, slots=True)
class PendingCheckpoint:
    """A persisted candidate whose verification was interrupted."""

    checkpoint_id: int
    round: int
    candidate: CheckpointCandidate
    lineage_seq: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An accepted checkpoint: verified progress and its lineage in the event log."""

    checkpoint_id: int
    round: int
    candidate: CheckpointCandidate
    evidence: Any
    lineage_seq: int
    decided_seq: int
    decided_at: datetime

    @property
    def completed(self) -> Sequence[Any]:
        return self.candidate.completed

    @property
    def remaining(self) -> Sequence[Any]:
        return self.candidate.remaining


@dataclass(frozen=True, slots=True)
class DurableState:
    """What a fresh context starts from: the latest accepted checkpoint and later events."""

    run_id: str
    status: str
    config: Any
    checkpoint: Checkpoint | None
    events: list[Event]
    last_seq: int
