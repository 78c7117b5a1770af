"""Records: an invocation, its input digest and exactly one terminal outcome."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Self, TypeAlias

from .._errors import DigestMismatch, InvalidInvocation, InvalidPayload
from .._validate import int_problem, name_problem, shown, utf8
from ._invocation import Invocation, document_problem

__all__ = [
    "Failure",
    "Outcome",
    "Record",
    "Success",
    "SuspendReason",
    "Suspended",
]

_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}\Z")


class SuspendReason(StrEnum):
    """Why an operation paused instead of finishing; the values are stored, never rename them."""

    APPROVAL = "approval"
    EXTERNAL_TOOL = "external_tool"
    PROVIDER_RESUME = "provider_resume"


_REASONS: Final = {reason.value: reason for reason in SuspendReason}


@dataclass(frozen=True, slots=True)
class Success:
    """The operation finished; ``output_json`` is its one complete JSON output document."""

    output_json: str
    _valid: bool = field(default=False, init=False, repr=False, compare=False)

    def _problems(self) -> list[str]:
        """Every rule this outcome breaks (empty when valid); a valid one is parsed once."""
        if self._valid:
            return []
        problem = document_problem("output_json", self.output_json)
        if problem is not None:
            return [problem]
        object.__setattr__(self, "_valid", True)
        return []


@dataclass(frozen=True, slots=True)
class Failure:
    """The operation failed for good; ``error`` is a stable name such as ``"RateLimited"``.

    ``error`` follows the id rules (1-256 UTF-8 bytes, no control characters) so it can be
    matched on; ``message`` is free text for people.
    """

    error: str
    retryable: bool
    message: str = ""

    def _problems(self) -> list[str]:
        """Every rule this outcome breaks (empty when valid)."""
        found = [name_problem("error", self.error)]
        if not isinstance(self.retryable, bool):
            found.append(f"retryable must be a bool, got {type(self.retryable).__name__}")
        if not isinstance(self.message, str):
            found.append(f"message must be a str, got {type(self.message).__name__}")
        elif utf8(self.message) is None:
            found.append("message is not valid UTF-8 text (it holds a lone surrogate)")
        return [problem for problem in found if problem is not None]


@dataclass(frozen=True, slots=True)
class Suspended:
    """The operation paused; ``state_json`` is versioned JSON state the resumption will read.

    A ``reason`` given as a known string is stored as its ``SuspendReason``.
    """

    reason: SuspendReason | str
    state_version: int
    state_json: str

    def __post_init__(self) -> None:
        reason = _REASONS.get(self.reason) if isinstance(self.reason, str) else None
        if reason is not None:
            object.__setattr__(self, "reason", reason)

    def _problems(self) -> list[str]:
        """Every rule this outcome breaks (empty when valid)."""
        found = [
            None
            if isinstance(self.reason, str) and self.reason in _REASONS
            else f"reason must be one of {', '.join(_REASONS)}; got {shown(self.reason)}",
            int_problem("state_version", self.state_version),
            document_problem("state_json", self.state_json),
        ]
        return [problem for problem in found if problem is not None]


Outcome: TypeAlias = Success | Failure | Suspended
"""Exactly one terminal outcome of an operation."""


@dataclass(frozen=True, slots=True)
class Record:
    """What a runtime persists for one invocation identity and returns on every replay."""

    invocation: Invocation
    input_digest: str
    outcome: Outcome

    @classmethod
    def for_invocation(cls, invocation: Invocation, outcome: Outcome) -> Self:
        """The record of ``outcome`` for ``invocation``, with the digest computed from its input."""
        return cls(invocation, invocation.input_digest(), outcome)

    def validate(self) -> None:
        """Raise ``InvalidPayload`` for a malformed part or ``DigestMismatch`` for a wrong digest.

        The invocation's input size is not bounded here: the runtime that accepted the
        invocation applied its own limit.
        """
        invocation = self.invocation
        if not isinstance(invocation, Invocation):
            raise InvalidPayload(
                f"a record's invocation must be an Invocation, got {type(invocation).__name__}"
            )
        run_id = invocation.run_id if name_problem("run_id", invocation.run_id) is None else None
        try:
            invocation.validate(max_input_bytes=None)
        except InvalidInvocation as error:
            raise InvalidPayload(f"record: {error.detail}", run_id=run_id) from None
        if not isinstance(self.outcome, Success | Failure | Suspended):
            raise InvalidPayload(
                "a record's outcome must be a Success, Failure or Suspended, got "
                f"{type(self.outcome).__name__}",
                run_id=run_id,
            )
        problems = self.outcome._problems()
        if problems:
            name = type(self.outcome).__name__.lower()
            raise InvalidPayload(f"record {name}: " + "; ".join(problems), run_id=run_id)
        if not isinstance(self.input_digest, str) or _DIGEST.match(self.input_digest) is None:
            raise InvalidPayload(
                "input_digest must be 'sha256:' followed by 64 lowercase hex digits",
                run_id=run_id,
            )
        expected = invocation.input_digest()
        if self.input_digest != expected:
            raise DigestMismatch(
                f"record for {invocation.stable_key()} carries input digest {self.input_digest} "
                f"but its input hashes to {expected}; the record belongs to different input",
                run_id=run_id,
            )
