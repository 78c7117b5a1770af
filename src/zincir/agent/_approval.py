"""Paused runs and the decisions that resume them: ``Approve``, ``Deny``, ``ExternalResult``.

A call pauses the run when its tool requires approval, or when the tool raises
``ApprovalRequired`` / ``CallDeferred``. Each paused call carries ``args_sha256``, the
SHA-256 of the canonical JSON of its arguments: a decision binds exactly those arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._errors import InvalidDocument, InvalidInput
from ..contract.payloads import ApprovalDecision, Message, ToolReturnPart, Usage

if TYPE_CHECKING:
    from ..restart._protocol import RestartCheckpoint, RestartStore

__all__ = [
    "APPROVAL_TOPIC",
    "PAUSED_CHECKPOINT",
    "Approve",
    "Decision",
    "Deny",
    "Execution",
    "ExternalResult",
    "PausedCall",
    "PausedRun",
    "approved",
    "args_sha256",
    "as_document",
    "current_approval",
]

Execution = Literal["approval", "external"]

PAUSED_CHECKPOINT = "zincir.agent.paused"
"""The restart checkpoint id under which ``PausedRun.save_checkpoint`` keeps a pause."""

APPROVAL_TOPIC = "zincir.approval"
"""A paused durable run waits on messages of this topic: a ResumeWorker claims it only once
one arrives (``zincir.send_message(store, run_id, APPROVAL_TOPIC, ...)``)."""

_APPROVAL: ContextVar[ApprovalDecision | None] = ContextVar("zincir_approval", default=None)


def current_approval() -> ApprovalDecision | None:
    """The decision under which the running tool call was approved, or None.

    A tool that raises ``ApprovalRequired`` or ``CallDeferred`` checks it first, so that
    the approved call runs instead of pausing again.
    """
    return _APPROVAL.get()


@contextmanager
def approved(decision: ApprovalDecision | None) -> Iterator[None]:
    """Run a tool call with ``current_approval()`` set to ``decision``."""
    token = _APPROVAL.set(decision)
    try:
        yield
    finally:
        _APPROVAL.reset(token)


def args_sha256(arguments: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of ``arguments`` (sorted keys, no whitespace)."""
    text = json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Approve:
    """Run the call; with ``arguments`` (or its older name ``override_arguments``), run it
    with those edited arguments instead of the model's. ``decided_by`` names who decided.

    Giving both names with different values is InvalidInput.
    """

    override_arguments: Mapping[str, Any] | None = None
    arguments: Mapping[str, Any] | None = field(default=None, kw_only=True)
    decided_by: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        one, other = self.arguments, self.override_arguments
        if one is not None and other is not None and _plain(one) != _plain(other):
            raise InvalidInput(
                "Approve got both arguments and override_arguments with different values; "
                "give the edited arguments once, as arguments=..."
            )
        if self.decided_by is not None and (
            not isinstance(self.decided_by, str) or not self.decided_by
        ):
            raise InvalidInput(f"decided_by must be a non-empty str, not {self.decided_by!r:.80}")

    @property
    def edited(self) -> Mapping[str, Any] | None:
        """The edited arguments the call runs with, or None: the model's."""
        return self.arguments if self.arguments is not None else self.override_arguments


def _plain(value: Any) -> Any:
    """``value`` with its mappings as dicts, to compare two spellings of the same JSON."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class Deny:
    """Do not run the call; the model is told it was denied (and why)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """The call's result, produced outside the agent; the model receives ``value``."""

    value: Any = None


Decision = Approve | Deny | ExternalResult


def as_document(decision: object, *, run_id: str | None = None) -> ApprovalDecision:
    """The ``ApprovalDecision`` document of a proposed decision (InvalidInput if it is none)."""
    try:
        if isinstance(decision, Approve):
            override = decision.edited
            return ApprovalDecision(
                decision="approve",
                override_arguments=None if override is None else dict(override),
                decided_by=decision.decided_by,
            )
        if isinstance(decision, Deny):
            return ApprovalDecision(decision="deny", reason=str(decision.reason))
        if isinstance(decision, ExternalResult):
            return ApprovalDecision(decision="external_result", result=decision.value)
    except InvalidDocument as error:
        raise InvalidInput(
            f"the decision is not JSON data: {error.detail}", run_id=run_id
        ) from None
    raise InvalidInput(
        f"a decision must be Approve, Deny or ExternalResult, not {type(decision).__name__}",
        run_id=run_id,
    )


@dataclass(frozen=True, slots=True)
class PausedCall:
    """One call waiting for a decision, at its fixed sequence.

    ``execution`` is ``approval`` (approve or deny it) or ``external`` (supply its result).
    """

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    sequence: int
    args_sha256: str
    execution: Execution = "approval"

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "sequence": self.sequence,
            "args_sha256": self.args_sha256,
            "execution": self.execution,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PausedCall:
        return cls(
            call_id=str(data["call_id"]),
            tool=str(data["tool"]),
            arguments=dict(data["arguments"]),
            sequence=int(data["sequence"]),
            args_sha256=str(data["args_sha256"]),
            execution="external" if data.get("execution") == "external" else "approval",
        )


@dataclass(frozen=True, slots=True)
class PausedRun:
    """A run stopped at model response ``request_number`` until each call in ``calls`` is
    decided; pass it to ``agent.resume`` (after a restart, ``agent.paused_run`` rebuilds it).

    ``messages`` is the conversation up to that response, ``completed`` the results of its
    calls that did not pause (the direct path needs them; the durable path replays them).
    """

    run_id: str | None
    prompt: str
    request_number: int
    calls: tuple[PausedCall, ...]
    messages: tuple[Message, ...] = ()
    usage: Usage = field(default_factory=Usage)
    completed: tuple[ToolReturnPart, ...] = ()

    def call(self, call_id: str) -> PausedCall | None:
        """The paused call with this id, or None."""
        return next((c for c in self.calls if c.call_id == call_id), None)

    @property
    def revision(self) -> int:
        """The restart-checkpoint revision of this pause, from its model-request number
        (and, for a second pause at the same response, the calls completed since)."""
        return self.request_number * 1000 + len(self.completed)

    async def save_checkpoint(
        self, store: RestartStore, *, run_id: str | None = None
    ) -> RestartCheckpoint:
        """Keep this pause in ``store`` so that any process can resume it
        (``agent.resume_checkpoint``); saving it again is a no-op, and a different pause at
        the same revision raises RevisionConflict (a replay that diverged fails closed).

        ``run_id`` names a direct run's pause (a durable one is saved under its run id).
        """
        from ..restart._protocol import RestartStore as Protocol

        if not isinstance(store, Protocol):
            raise InvalidInput(
                "store must be a zincir.restart store (FileRestartStore, SQLRestartStore)",
                run_id=self.run_id,
            )
        owner = self.run_id or run_id
        if owner is None or (self.run_id is not None and run_id not in (None, self.run_id)):
            raise InvalidInput(
                "save a direct run's pause with run_id=...; a durable pause is saved under "
                "its own run id",
                run_id=self.run_id,
            )
        return await store.save(owner, PAUSED_CHECKPOINT, self.revision, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in a restart checkpoint; a durable run's ``agent_paused`` event
        leaves ``messages`` out when the paused model request's record holds them."""
        return {
            "run_id": self.run_id,
            "prompt": self.prompt,
            "request_number": self.request_number,
            "calls": [c.to_dict() for c in self.calls],
            "messages": [m.to_dict() for m in self.messages],
            "usage": self.usage.to_dict(),
            "completed": [p.to_dict() for p in self.completed],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PausedRun:
        """Read the JSON form back; InvalidDocument if it is not one."""
        try:
            return cls(
                run_id=data["run_id"],
                prompt=str(data["prompt"]),
                request_number=int(data["request_number"]),
                calls=tuple(PausedCall.from_dict(c) for c in data["calls"]),
                messages=tuple(Message.from_dict(m) for m in data["messages"]),
                usage=Usage.from_dict(data["usage"]),
                completed=tuple(ToolReturnPart.from_dict(p) for p in data["completed"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidDocument(f"not a paused run: {error}") from None
