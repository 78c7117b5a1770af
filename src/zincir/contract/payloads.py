"""Versioned payload documents: the neutral JSON each operation kind carries.

Every document is declarative data only: no callables, credentials, authorization headers
or cancellation handles. Each validates strictly (unknown fields, wrong types, NaN and
duplicate keys rejected) and raises ``InvalidDocument``; a header or metadata map naming a
credential raises ``SensitiveHeader`` (configure credentials on the worker's transport).

``parse_payload(kind, text)`` reads the input document of an operation kind (or, with
``output=True``, its output document); ``Doc.from_json(text)`` and ``doc.to_json()`` read and
write one document class. ``to_json()`` is compact and stable, so it can be an invocation's
``input_json``.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Final, Literal, Self, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, PydanticSerializationError

from .._errors import InvalidDocument, SensitiveHeader
from .._json import (
    MAX_NESTING,
    StrictJsonError,
    checked_size,
    depth_bound,
    dumps,
    encode_checked,
    encode_part,
    loads_strict_text,
    remember_strict,
    too_deep,
)
from .._memo import TextMemo
from .._prefixes import note_shared
from ._invocation import OperationKind
from ._texts import TextsByObject

__all__ = [
    "INPUT_DOCUMENTS",
    "OUTPUT_DOCUMENTS",
    "ApprovalDecision",
    "ApprovalRequest",
    "ClientIdentity",
    "Document",
    "EventDelivery",
    "McpRequest",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "PartDelta",
    "PartEnd",
    "PartStart",
    "RetryDelay",
    "RunContext",
    "StreamPart",
    "StreamUsage",
    "TextPart",
    "ToolCallPart",
    "ToolDefinition",
    "ToolOutput",
    "ToolRequest",
    "ToolReturnPart",
    "Usage",
    "is_sensitive_header",
    "parse_payload",
    "parse_stream_part",
    "stream_parts",
]

_SENSITIVE_NAMES: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
_SENSITIVE_SUFFIXES: Final = ("-token", "-api-key", "-secret")
_MAX_PROVIDER_METADATA: Final = 32


def is_sensitive_header(name: str) -> bool:
    """Whether a header or metadata key names a credential (case-insensitive; ``_`` = ``-``)."""
    key = name.strip().lower().replace("_", "-")
    return key in _SENSITIVE_NAMES or key.endswith(_SENSITIVE_SUFFIXES)


def _refuse(name: str) -> PydanticCustomError:
    return PydanticCustomError(
        "sensitive_header",
        f"{name!r} names a credential; payloads are persisted, so configure it on the "
        "worker's transport instead",
    )


def _check_headers(headers: dict[str, str]) -> dict[str, str]:
    for name in headers:
        if not name:
            raise PydanticCustomError("empty_header", "a header name must not be empty")
        if is_sensitive_header(name):
            raise _refuse(name)
    return headers


def _check_metadata(metadata: dict[str, JsonValue]) -> dict[str, JsonValue]:
    pending: list[JsonValue] = [metadata]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if is_sensitive_header(key):
                    raise _refuse(key)
                pending.append(item)
        elif isinstance(value, list):
            pending.extend(value)
    return metadata


def _as_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


_T = TypeVar("_T")

Items: TypeAlias = Annotated[Sequence[_T], BeforeValidator(_as_tuple)]
"""A sequence, always stored as a tuple (a list is accepted and converted; a str is not)."""
JsonObject: TypeAlias = dict[str, JsonValue]
Headers: TypeAlias = Annotated[dict[str, str], AfterValidator(_check_headers)]
Metadata: TypeAlias = Annotated[JsonObject, AfterValidator(_check_metadata)]
Name: TypeAlias = Annotated[str, Field(min_length=1)]
Count: TypeAlias = Annotated[int, Field(ge=0)]
Seconds: TypeAlias = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    """Strict, frozen, closed pydantic model whose errors are zincir errors."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, hide_input_in_errors=True
    )
    _KEPT_ITEMS: ClassVar[frozenset[str]] = frozenset()
    """Sequence fields whose documents' texts are kept and reused (a conversation's messages
    and the tools on offer, repeated by every later request)."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise _translate(type(self).__name__, error) from None

    # Pydantic then treats this as its own __init__: nested validation does not call it.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Pydantic's validation, raising ``InvalidDocument`` instead of ``ValidationError``."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as error:
            raise _translate(cls.__name__, error) from None

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Self:
        """Strict JSON validation, raising ``InvalidDocument`` instead of ``ValidationError``."""
        return cls.model_validate(_strict_json(cls.__name__, json_data), *args, **kwargs)

    @classmethod
    def model_validate_strings(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Pydantic's string validation, raising ``InvalidDocument`` instead."""
        try:
            return super().model_validate_strings(obj, *args, **kwargs)
        except ValidationError as error:
            raise _translate(cls.__name__, error) from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Read one document from strict JSON text; raises ``InvalidDocument``.

        A text this process wrote or read a moment ago gives back that same (immutable)
        document without parsing it again.
        """
        if isinstance(text, str):
            known = _RECENT.get(text)
            if type(known) is cls:
                return known
        document = cls.model_validate(_strict_json(cls.__name__, text))
        if isinstance(text, str):
            _RECENT.put(text, document)
        return document

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Read one document from parsed JSON; raises ``InvalidDocument``."""
        return cls.model_validate(data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new document")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new document")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update`` the result is validated like a new document."""
        if not update:
            return super().model_copy(deep=deep)
        return self.model_validate({**dict(self), **update})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form (tuples as lists)."""
        return self._dump(None)

    def _dump(self, exclude: set[str] | None) -> dict[str, Any]:
        try:
            return self.model_dump(mode="json", exclude=exclude)
        except (PydanticSerializationError, ValueError) as error:
            # a validated document holds only JSON data: what pydantic refuses is its depth
            if "depth" not in str(error):
                raise
            raise too_deep(type(self).__name__) from None

    def to_json(self) -> str:
        """Compact, stable JSON text: fields in declaration order, UTF-8, no whitespace."""
        text = self._encode()[0]
        _RECENT.put(text, self)
        remember_strict(text)
        return text

    def _encode(self) -> tuple[str, int]:
        """The text of :meth:`to_dict` and a bound on its nesting depth; the fields named in
        ``_KEPT_ITEMS`` composed of their documents' kept texts."""
        what = type(self).__name__
        kept = self._KEPT_ITEMS
        if not kept:
            value = self.to_dict()
            text = dumps(value, what=what, str_keys=True)
            return text, depth_bound(text, value)
        plain = self._dump(set(kept))
        values = self.__dict__
        pieces = ["{"]  # joined once: a long conversation's text is copied once a turn
        deepest = 0
        first: tuple[_Array, _Array | None, tuple[str, ...]] | None = None
        for name, key in _field_keys(type(self)).items():
            pieces.append(key if len(pieces) == 1 else "," + key)
            if name in kept:
                array, carried = _items_text(type(self), name, values[name])
                depth = 1 + array.deepest
                pieces.append("[")
                if first is None:  # the parts before it are the text's head
                    first = (array, carried, tuple(pieces))
                pieces += array.texts
                pieces.append("]")
            else:
                value = plain[name]
                part = encode_part(value)
                depth = depth_bound(part, value) if isinstance(value, dict | list) else 0
                pieces.append(part)
            deepest = max(deepest, depth)
        if deepest + 1 > MAX_NESTING:
            # The kept depths are bounds (bracket counts, strings' brackets included): let
            # the encoder judge the real depth of the whole document.
            value = self.to_dict()
            text = dumps(value, what=what, str_keys=True)
            return text, depth_bound(text, value)
        pieces.append("}")
        text = checked_size("".join(pieces), what=what)
        if first is not None:
            _joined(text, *first)
        return text, deepest + 1


@dataclass(frozen=True, slots=True)
class _Array:
    """A kept field's array as last written: its items, the texts that joined make its
    inside (the items' kept texts and the commas), their length and the items' depth bound;
    and, for a document's first kept array, the document's text and the parts before the
    array's inside (its head)."""

    key: tuple[type[_Strict], str, int]
    items: tuple[_Strict, ...]
    texts: tuple[str, ...]
    chars: int
    deepest: int
    text: str | None = None
    head: tuple[str, ...] = ()


def _items_text(
    cls: type[_Strict], name: str, items: Sequence[_Strict]
) -> tuple[_Array, _Array | None]:
    """The array of ``items``, and the array it carried over: when the last array written
    for this field of a conversation (told by its first item) is a prefix of ``items`` (a
    conversation that grew), only the new items' texts are added, so earlier messages are
    not walked or copied again."""
    items = tuple(items)
    key = (cls, name, id(items[0]) if items else 0)  # an entry holds its first item alive
    with _ARRAYS_LOCK:
        previous = _ARRAYS.get(key)
    texts: tuple[str, ...] = ()
    chars = deepest = start = 0
    carried = None
    if previous is not None:
        old = previous.items
        # the very same documents: equal ones may encode otherwise ({"a": 1} == {"a": 1.0})
        if len(old) <= len(items) and all(map(operator.is_, items, old)):
            start, texts, chars, deepest = (
                len(old),
                previous.texts,
                previous.chars,
                previous.deepest,
            )
            carried = previous
    found = [_kept_text(item) for item in items[start:]]
    if found:
        added = [part for text, _ in found for part in (",", text)]
        if not texts:
            added = added[1:]
        chars += sum(map(len, added))
        texts = (*texts, *added)
        deepest = max(deepest, *(depth for _, depth in found))
    array = _Array(key, items, texts, chars, deepest)
    _keep(array)
    return array, carried


def _joined(text: str, array: _Array, carried: _Array | None, head: tuple[str, ...]) -> None:
    """``text`` was joined from ``head``, then ``array``'s texts: when ``array`` carried
    over the previous array of its conversation with the same head, both texts begin with
    the same parts (the very same strings), so their shared prefix is noted for the input's
    cut (see :mod:`zincir._prefixes`) instead of being compared character by character."""
    if carried is not None and carried.text is not None and carried.head == head:
        note_shared(text, carried.text, sum(map(len, head)) + carried.chars)
    _keep(_Array(array.key, array.items, array.texts, array.chars, array.deepest, text, head))


def _keep(array: _Array) -> None:
    """Keep ``array`` as the latest of its field and conversation, within the bounds."""
    global _ARRAYS_HELD
    with _ARRAYS_LOCK:
        replaced = _ARRAYS.pop(array.key, None)
        if replaced is not None:
            _ARRAYS_HELD -= _held(replaced)
        _ARRAYS_HELD += _held(array)
        _ARRAYS[array.key] = array
        while len(_ARRAYS) > 1 and (len(_ARRAYS) > _ARRAYS_KEPT or _ARRAYS_HELD > _ARRAYS_CHARS):
            _, dropped = _ARRAYS.popitem(last=False)
            _ARRAYS_HELD -= _held(dropped)


def _held(array: _Array) -> int:
    """The characters ``array`` holds alive: its items' texts and its document's text."""
    return array.chars + len(array.text or "")


def _kept_text(document: _Strict) -> tuple[str, int]:
    """A document's text and depth bound, encoded once while it lives."""
    known = _TEXTS.get(document)
    if known is None:
        known = document._encode()
        _TEXTS.put(document, known)
    return known


def _field_keys(cls: type[_Strict]) -> dict[str, str]:
    """Each field's name and its JSON key with the colon, in declaration order."""
    keys = _KEYS.get(cls)
    if keys is None:
        keys = _KEYS[cls] = {name: encode_checked(name) + ":" for name in cls.model_fields}
    return keys


_KEYS: dict[type[_Strict], dict[str, str]] = {}
_ARRAYS: OrderedDict[tuple[type[_Strict], str, int], _Array] = OrderedDict()
"""The latest arrays written, per document class, kept field and first item (one per
conversation a process carries on at once), within _ARRAYS_KEPT and _ARRAYS_CHARS."""
_ARRAYS_KEPT: Final = 32
_ARRAYS_CHARS: Final = 64 * 1024 * 1024  # the texts the arrays hold alive
_ARRAYS_HELD = 0
_ARRAYS_LOCK: Final = threading.Lock()
_RECENT: TextMemo[_Strict] = TextMemo(chars=32 << 20)
"""Documents by the text this process last wrote or read them as (a long conversation's
request up to 8 M characters included: its handler then reads it without parsing it)."""
_TEXTS: TextsByObject[_Strict, tuple[str, int]] = TextsByObject()
"""The text and depth bound of each live document kept for reuse."""


def _strict_json(what: str, text: object) -> Any:
    try:
        return loads_strict_text(text)
    except StrictJsonError as error:
        raise InvalidDocument(f"{what}: not one strict JSON document: {error}") from None


def _translate(what: str, error: ValidationError) -> InvalidDocument:
    """A zincir error naming each failing field; input values are never shown."""
    details = error.errors(include_url=False, include_context=False, include_input=False)
    sensitive = [detail for detail in details if detail["type"] == "sensitive_header"]
    chosen = sensitive or details
    shown = "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or '(document)'}: {detail['msg']}"
        for detail in chosen[:5]
    )
    more = f" (and {len(chosen) - 5} more)" if len(chosen) > 5 else ""
    cls = SensitiveHeader if sensitive else InvalidDocument
    return cls(f"{what}: {shown}{more}")


class Document(_Strict):
    """Base of every top-level payload document; ``version`` is the wire format version."""

    version: Literal[1] = 1


# -- model request and response ---------------------------------------------------------


class TextPart(_Strict):
    """Text written by the user or system, or produced by the model."""

    type: Literal["text"] = "text"
    text: str


class ToolCallPart(_Strict):
    """A tool call the model asked for.

    ``malformed_arguments`` holds the model's argument text when it was not a JSON object
    (``arguments`` is then empty): the loop sends the call back to the model as a retry
    prompt. It is left out of the document when unset, so older documents read and encode
    as before.
    """

    type: Literal["tool_call"] = "tool_call"
    tool_call_id: Name
    tool_name: Name
    arguments: JsonObject = Field(default_factory=dict)
    malformed_arguments: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="after")
    def _malformed_has_no_arguments(self) -> Self:
        if self.malformed_arguments is not None and self.arguments:
            raise PydanticCustomError(
                "malformed_arguments", "a call with malformed_arguments has no arguments"
            )
        return self

    @property
    def arguments_text(self) -> str:
        """The arguments as the model sent them: the malformed text, else compact JSON."""
        if self.malformed_arguments is not None:
            return self.malformed_arguments
        return dumps(self.arguments)


class ToolReturnPart(_Strict):
    """A tool's result sent back to the model."""

    type: Literal["tool_return"] = "tool_return"
    tool_call_id: Name
    tool_name: Name
    content: JsonValue
    is_error: bool = False


MessagePart: TypeAlias = Annotated[
    TextPart | ToolCallPart | ToolReturnPart, Field(discriminator="type")
]
ResponsePart: TypeAlias = Annotated[TextPart | ToolCallPart, Field(discriminator="type")]


class Message(_Strict):
    """One message of the conversation sent to the model."""

    role: Literal["system", "user", "assistant", "tool"]
    parts: Items[MessagePart]


class ToolDefinition(_Strict):
    """A tool the model may call; ``parameters`` is its JSON Schema."""

    name: Name
    description: str = ""
    parameters: JsonObject = Field(default_factory=dict)
    strict: bool | None = None


class ModelSettings(_Strict):
    """Declarative request settings; ``extra_body`` holds provider-specific options."""

    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    stop_sequences: Items[str] = ()
    parallel_tool_calls: bool | None = None
    timeout_seconds: Annotated[float, Field(gt=0)] | None = None
    extra_headers: Headers = Field(default_factory=dict)
    extra_body: Metadata = Field(default_factory=dict)


class ModelRequest(Document):
    """Input of ``model_request`` and ``model_stream``: messages, tools and settings."""

    _KEPT_ITEMS: ClassVar[frozenset[str]] = frozenset({"messages", "tools"})

    model: str = ""
    messages: Items[Message]
    tools: Items[ToolDefinition] = ()
    settings: ModelSettings = Field(default_factory=ModelSettings)
    metadata: Metadata = Field(default_factory=dict)


class Usage(_Strict):
    """Token counts of one model response."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    details: dict[str, Count] = Field(default_factory=dict)


class RunResult(_Strict):
    """What a completed agent run keeps as its result: the final text, the conversation and
    the summed usage; its messages are composed of their kept texts, as a request's are."""

    _KEPT_ITEMS: ClassVar[frozenset[str]] = frozenset({"messages"})

    output: str
    messages: Items[Message]
    usage: Usage


class ModelResponse(Document):
    """Output of ``model_request`` and ``model_stream``: text and tool-call parts, usage."""

    parts: Items[ResponsePart]
    usage: Usage = Field(default_factory=Usage)
    model_name: str = ""
    finish_reason: str | None = None
    provider_response_id: str | None = None


# -- stream parts ---------------------------------------------------------------------------


class PartStart(Document):
    """A response part begins; a tool-call part names its call id and tool."""

    type: Literal["part_start"] = "part_start"
    index: Count
    part_kind: Literal["text", "tool_call"]
    tool_call_id: Name | None = None
    tool_name: Name | None = None

    @model_validator(mode="after")
    def _names_match_kind(self) -> Self:
        named = self.tool_call_id is not None and self.tool_name is not None
        unnamed = self.tool_call_id is None and self.tool_name is None
        if (self.part_kind == "tool_call" and not named) or (
            self.part_kind == "text" and not unnamed
        ):
            raise PydanticCustomError(
                "part_names",
                "a tool_call part needs tool_call_id and tool_name; a text part has neither",
            )
        return self


class PartDelta(Document):
    """More content of a part: text, or a fragment of a tool call's JSON arguments."""

    type: Literal["part_delta"] = "part_delta"
    index: Count
    delta: str


class PartEnd(Document):
    """A part is complete."""

    type: Literal["part_end"] = "part_end"
    index: Count


class StreamUsage(Document):
    """The stream's usage; it follows the last part."""

    type: Literal["usage"] = "usage"
    usage: Usage


StreamPart: TypeAlias = Annotated[
    PartStart | PartDelta | PartEnd | StreamUsage, Field(discriminator="type")
]
_STREAM_PART: Final[TypeAdapter[StreamPart]] = TypeAdapter(StreamPart)


def parse_stream_part(text: str | bytes) -> PartStart | PartDelta | PartEnd | StreamUsage:
    """Read one stream part from strict JSON text; raises ``InvalidDocument``."""
    data = _strict_json("StreamPart", text)
    try:
        return _STREAM_PART.validate_python(data)
    except ValidationError as error:
        raise _translate("StreamPart", error) from None


def stream_parts(
    response: ModelResponse,
) -> tuple[PartStart | PartDelta | PartEnd | StreamUsage, ...]:
    """The normalized stream of a response: start, one delta, end per part, then usage.

    Replaying a stored response yields these whatever chunk boundaries the provider used.
    """
    events: list[PartStart | PartDelta | PartEnd | StreamUsage] = []
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            events.append(PartStart(index=index, part_kind="text"))
            events.append(PartDelta(index=index, delta=part.text))
        else:
            events.append(
                PartStart(
                    index=index,
                    part_kind="tool_call",
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                )
            )
            events.append(PartDelta(index=index, delta=part.arguments_text))
        events.append(PartEnd(index=index))
    events.append(StreamUsage(usage=response.usage))
    return tuple(events)


# -- tools and approvals --------------------------------------------------------------------


class RunContext(_Strict):
    """The replay-safe part of the agent's run context a tool worker may read."""

    run_id: Name
    step: Count = 0
    agent_name: str = ""
    metadata: Metadata = Field(default_factory=dict)


class ApprovalDecision(Document):
    """Output of ``approval_resume``: the decision the agent applies to a paused call.

    ``override_arguments`` replaces the arguments of an approved call (the edited arguments
    it runs with); ``result`` is the value supplied for an ``external_result``;
    ``decided_by`` names who decided (free text), left out of the document when unset so
    older documents read and encode as before.
    """

    decision: Literal["approve", "deny", "external_result"]
    reason: str = ""
    override_arguments: JsonObject | None = None
    result: JsonValue = None
    decided_by: str | None = Field(default=None, exclude_if=lambda value: value is None)


class ToolRequest(Document):
    """Input of ``tool_call``: the call, its policy-transformed arguments and run context."""

    call: ToolCallPart
    arguments: JsonObject
    context: RunContext
    retry: Count = 0
    approval: ApprovalDecision | None = None


class ToolOutput(Document):
    """Output of ``tool_call``: the tool's result and any follow-up request messages."""

    tool_call_id: Name
    tool_name: Name
    content: JsonValue
    is_error: bool = False
    follow_up_messages: Items[Message] = ()
    metadata: Metadata = Field(default_factory=dict)


class ApprovalRequest(Document):
    """Input of ``approval_resume``: a paused call and the decision proposed for it.

    ``execution`` says how the call completes: run the tool after ``approval``, or accept an
    ``external`` result.
    """

    call: ToolCallPart
    arguments: JsonObject
    execution: Literal["approval", "external"]
    proposed: ApprovalDecision


# -- MCP, events, retries -------------------------------------------------------------------


class ClientIdentity(_Strict):
    """The MCP client's name and version as sent in ``initialize``."""

    name: Name
    version: str = ""


class McpRequest(Document):
    """Input of ``mcp_request``: one high-level MCP operation, its round trips bounded.

    ``meta`` is routing metadata (MCP ``_meta``); ``headers`` are public headers only.
    """

    method: Name
    params: JsonObject = Field(default_factory=dict)
    meta: Metadata = Field(default_factory=dict)
    headers: Headers = Field(default_factory=dict)
    client: ClientIdentity
    capabilities: JsonObject = Field(default_factory=dict)
    max_round_trips: Annotated[int, Field(ge=0, le=64)] = 8


class EventDelivery(Document):
    """Input of ``event_delivery``: one application or MCP event.

    An MCP notification names the request it came from (``parent_sequence``) and its
    position in that request's batch (``index``).
    """

    name: Name
    data: JsonValue = None
    source: Literal["application", "mcp"] = "application"
    parent_sequence: Count | None = None
    index: Count | None = None
    metadata: Metadata = Field(default_factory=dict)


class RetryDelay(Document):
    """Input of ``retry_delay``: the durable timer before retry number ``retry``.

    ``failed_request`` is the model-request number that failed; ``provider_metadata`` is
    bounded to 32 entries.
    """

    retry: Annotated[int, Field(ge=1)]
    failed_request: Count | None = None
    delay_seconds: Seconds
    cumulative_delay_seconds: Seconds
    error: Name
    retry_after_seconds: Seconds | None = None
    provider_metadata: Annotated[Metadata, Field(max_length=_MAX_PROVIDER_METADATA)] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _cumulative_covers_delay(self) -> Self:
        if self.cumulative_delay_seconds < self.delay_seconds:
            raise PydanticCustomError(
                "cumulative_delay", "cumulative_delay_seconds must be at least delay_seconds"
            )
        return self

    @property
    def delay(self) -> timedelta:
        """``delay_seconds`` as a duration."""
        return timedelta(seconds=self.delay_seconds)

    @property
    def cumulative_delay(self) -> timedelta:
        """``cumulative_delay_seconds`` as a duration."""
        return timedelta(seconds=self.cumulative_delay_seconds)


INPUT_DOCUMENTS: Final[Mapping[OperationKind, type[Document]]] = MappingProxyType(
    {
        OperationKind.MODEL_REQUEST: ModelRequest,
        OperationKind.MODEL_STREAM: ModelRequest,
        OperationKind.TOOL_CALL: ToolRequest,
        OperationKind.MCP_REQUEST: McpRequest,
        OperationKind.EVENT_DELIVERY: EventDelivery,
        OperationKind.RETRY_DELAY: RetryDelay,
        OperationKind.APPROVAL_RESUME: ApprovalRequest,
    }
)
"""The input document of every operation kind."""

OUTPUT_DOCUMENTS: Final[Mapping[OperationKind, type[Document]]] = MappingProxyType(
    {
        OperationKind.MODEL_REQUEST: ModelResponse,
        OperationKind.MODEL_STREAM: ModelResponse,
        OperationKind.TOOL_CALL: ToolOutput,
        OperationKind.APPROVAL_RESUME: ApprovalDecision,
    }
)
"""The output document of the kinds that have one; the others return free JSON."""


def parse_payload(
    kind: OperationKind | str, text: str | bytes, *, output: bool = False
) -> Document:
    """Read the input document of ``kind`` (its output document with ``output=True``).

    Raises ``InvalidDocument`` (``SensitiveHeader`` for a credential header).
    """
    table = OUTPUT_DOCUMENTS if output else INPUT_DOCUMENTS
    try:
        document = table.get(OperationKind(kind))
    except ValueError:
        document = None
    if document is None:
        role = "output" if output else "input"
        raise InvalidDocument(
            f"no {role} document for kind {kind!r}; known: {', '.join(str(k) for k in table)}"
        )
    return document.from_json(text)
