"""The invocation: the stable identity and input of one side-effecting unit of agent work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Self

from .._errors import InvalidInput, InvalidInvocation
from .._json import StrictJsonError, known_strict, loads_strict
from .._pieces import layout
from .._validate import MAX_ID_BYTES, MAX_SEQUENCE, int_problem, name_problem, shown, utf8_size

__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "INVOCATION_FIELDS",
    "MAX_ID_BYTES",
    "MAX_SEQUENCE",
    "Invocation",
    "OperationKind",
]

DEFAULT_MAX_INPUT_BYTES: Final = 1024 * 1024
"""Default bound on the UTF-8 size of ``input_json`` (1 MiB); ``validate()`` takes another."""

INVOCATION_FIELDS: Final = ("run_id", "step_id", "sequence", "kind", "handler_id", "input_json")
"""The six attribute names, in the order every JSON form writes them."""


class OperationKind(StrEnum):
    """The closed vocabulary of durable operations; the values are stored, so never rename them."""

    MODEL_REQUEST = "model_request"
    MODEL_STREAM = "model_stream"
    TOOL_CALL = "tool_call"
    MCP_REQUEST = "mcp_request"
    EVENT_DELIVERY = "event_delivery"
    RETRY_DELAY = "retry_delay"
    APPROVAL_RESUME = "approval_resume"


_KINDS: Final = {kind.value: kind for kind in OperationKind}


def document_problem(what: str, value: object, *, max_bytes: int | None = None) -> str | None:
    """Why ``value`` is not exactly one strict JSON document (None when it is)."""
    if not isinstance(value, str):
        return f"{what} must be a str holding one JSON document, got {type(value).__name__}"
    size = utf8_size(value)
    if size is None:
        return f"{what} is not valid UTF-8 text (it holds a lone surrogate)"
    if max_bytes is not None and size > max_bytes:
        return _too_large(what, size, max_bytes)
    if known_strict(value):
        return None
    try:
        loads_strict(value)
    except StrictJsonError as error:
        return f"{what} is not exactly one strict JSON document: {error}"
    return None


def _too_large(what: str, size: int, max_bytes: int) -> str:
    return (
        f"{what} is {size} bytes; the limit is {max_bytes} (raise the runtime's "
        "max_input_bytes, as zincir.agent.Runner does for a long conversation, or store "
        "large data elsewhere)"
    )


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


@dataclass(frozen=True, slots=True)
class Invocation:
    """One unit of agent work: identity (run, step, sequence), kind, handler and input document.

    Constructing one never validates; call ``validate()``. A retry reuses all six fields
    unchanged. A ``kind`` given as a known string is stored as its ``OperationKind``.
    """

    run_id: str
    step_id: str
    sequence: int
    kind: OperationKind | str
    handler_id: str
    input_json: str
    _input_bytes: int | None = field(default=None, init=False, repr=False, compare=False)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = _KINDS.get(self.kind) if isinstance(self.kind, str) else None
        if kind is not None:
            object.__setattr__(self, "kind", kind)

    def validate(self, max_input_bytes: int | None = DEFAULT_MAX_INPUT_BYTES) -> None:
        """Raise ``InvalidInvocation`` naming every broken rule; ``None`` lifts the size bound."""
        if max_input_bytes is not None and (
            isinstance(max_input_bytes, bool)
            or not isinstance(max_input_bytes, int)
            or max_input_bytes < 1
        ):
            raise InvalidInput(f"max_input_bytes must be a positive int, got {max_input_bytes!r}")
        size = self._input_bytes
        if size is not None:  # the fields never change: only the bound can differ
            if max_input_bytes is None or size <= max_input_bytes:
                return
            raise InvalidInvocation(
                "invalid invocation: " + _too_large("input_json", size, max_input_bytes),
                run_id=self.run_id,
            )
        found = [
            name_problem("run_id", self.run_id),
            name_problem("step_id", self.step_id),
            int_problem("sequence", self.sequence),
            None
            if isinstance(self.kind, str) and self.kind in _KINDS
            else f"kind must be one of {', '.join(_KINDS)}; got {shown(self.kind)}",
            name_problem("handler_id", self.handler_id),
            document_problem("input_json", self.input_json, max_bytes=max_input_bytes),
        ]
        problems = [problem for problem in found if problem is not None]
        if problems:
            raise InvalidInvocation(
                "invalid invocation: " + "; ".join(problems), run_id=self._safe_run_id()
            )
        object.__setattr__(self, "_input_bytes", utf8_size(self.input_json))

    def stable_key(self) -> str:
        """The idempotency key ``<run_id>/<step_id>/<sequence>``, unique per identity.

        In each id ``%`` becomes ``%25`` and ``/`` becomes ``%2F`` before joining, so the
        key never holds a bare ``/`` inside a part and different identities never share a
        key: ``("a/b", "c", 1)`` gives ``a%2Fb/c/1`` and ``("a", "b/c", 1)`` gives ``a/b%2Fc/1``.
        """
        if not (isinstance(self.run_id, str) and isinstance(self.step_id, str)) or not (
            isinstance(self.sequence, int) and not isinstance(self.sequence, bool)
        ):
            raise InvalidInvocation(
                "no stable key: run_id and step_id must be str and sequence an int; "
                "call validate() first"
            )
        return f"{_escape(self.run_id)}/{_escape(self.step_id)}/{self.sequence}"

    def input_digest(self) -> str:
        """``"sha256:<64 hex>"`` of the UTF-8 bytes of ``input_json``; it binds the exact input."""
        if self._digest is not None:  # computed once: the fields never change
            return self._digest
        digest = None
        if isinstance(self.input_json, str):
            try:  # continued from the hash of this step's previous input where it only grew
                digest = layout(self.input_json, self._step()).digest
            except UnicodeEncodeError:
                pass
        if digest is None:
            problem = (
                "input_json is not valid UTF-8 text (it holds a lone surrogate)"
                if isinstance(self.input_json, str)
                else "input_json must be a str"
            )
            raise InvalidInvocation(f"no input digest: {problem}", run_id=self._safe_run_id())
        object.__setattr__(self, "_digest", digest)
        return digest

    def _step(self) -> tuple[str, str, str] | None:
        """The key under which this process keeps the layout of the step's last input."""
        if not (isinstance(self.run_id, str) and isinstance(self.step_id, str)):
            return None
        return (self.run_id, self.step_id, str(self.kind))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, keyed by the six attribute names (``kind`` as its string)."""
        kind = self.kind.value if isinstance(self.kind, OperationKind) else self.kind
        return {
            "run_id": self.run_id,
            "step_id": self.step_id,
            "sequence": self.sequence,
            "kind": kind,
            "handler_id": self.handler_id,
            "input_json": self.input_json,
        }

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> Self:
        """Build from the JSON object form; exactly the six keys with JSON-native types.

        Raises ``InvalidInvocation`` for a missing or unknown key or a wrong type. The limits
        are not checked here: call ``validate()``.
        """
        if not isinstance(mapping, Mapping):
            raise InvalidInvocation(
                f"an invocation must be a JSON object, got {type(mapping).__name__}"
            )
        run_id = mapping.get("run_id")
        run_id = run_id if name_problem("run_id", run_id) is None else None
        unknown = sorted(shown(key) for key in mapping if key not in INVOCATION_FIELDS)
        missing = [key for key in INVOCATION_FIELDS if key not in mapping]
        if unknown or missing:
            parts = [f"unknown keys {', '.join(unknown)}"] if unknown else []
            parts += [f"missing keys {', '.join(map(repr, missing))}"] if missing else []
            raise InvalidInvocation(
                "an invocation has exactly the keys run_id, step_id, sequence, kind, "
                "handler_id, input_json: " + "; ".join(parts),
                run_id=run_id,
            )
        wrong = [
            f"{key} must be {'an int' if key == 'sequence' else 'a str'}, "
            f"got {type(mapping[key]).__name__}"
            for key in INVOCATION_FIELDS
            if not _has_json_type(key, mapping[key])
        ]
        if wrong:
            raise InvalidInvocation("invalid invocation: " + "; ".join(wrong), run_id=run_id)
        return cls(**{key: mapping[key] for key in INVOCATION_FIELDS})

    def _safe_run_id(self) -> str | None:
        """The run id when it is fit to show in an error message."""
        return self.run_id if name_problem("run_id", self.run_id) is None else None


def _has_json_type(key: str, value: object) -> bool:
    if key == "sequence":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str)
