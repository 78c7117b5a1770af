"""The canonical JSON form of a record, and its strict decoder.

Layout (version 1), fields always in this order, no insignificant whitespace::

    {"version":1,
     "invocation":{"run_id":…,"step_id":…,"sequence":…,"kind":…,"handler_id":…,"input_json":…},
     "input_digest":"sha256:<64 hex>",
     "outcome":{"success":{"output_json":…}}}

``outcome`` holds exactly one of ``{"success":{"output_json":…}}``,
``{"failure":{"error":…,"retryable":…,"message":…}}`` or
``{"suspended":{"reason":…,"state_version":…,"state_json":…}}``. The documents
``input_json``, ``output_json`` and ``state_json`` are JSON strings holding the exact text,
because the digest binds their exact bytes. Strings are written as UTF-8, not ``\\u`` escapes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from .._errors import (
    AmbiguousOutcome,
    InvalidInvocation,
    InvalidPayload,
    UnknownField,
    UnsupportedVersion,
)
from .._json import StrictJsonError, checked_size, encode_part, loads_strict_text
from .._validate import name_problem
from ._invocation import INVOCATION_FIELDS, Invocation, OperationKind
from ._record import Failure, Outcome, Record, Success, Suspended

__all__ = [
    "INPUT_LEFT_OUT",
    "RECORD_VERSION",
    "decode_record",
    "decode_record_for",
    "encode_record",
    "encode_valid_record",
    "record_input_removed",
    "record_with_input",
    "record_without_input",
]

RECORD_VERSION: Final = 1
"""The record format version this code writes and reads."""

INPUT_LEFT_OUT: Final = ',"input_json":null},"input_digest":'
"""Where a record stored without its input holds ``null`` instead: no encoded string can
hold this text (a quote inside one is escaped), so its first occurrence is the slot."""
_INPUT_END: Final = '},"input_digest":'

_COMPOSED: Final[deque[tuple[str, str, str]]] = deque(maxlen=4)
"""The last texts :func:`record_with_input` composed, with their parts (held by identity:
a store's reader decodes the text it was just given)."""
_TOP_FIELDS: Final = ("version", "invocation", "input_digest", "outcome")
_OUTCOME_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "success": ("output_json",),
    "failure": ("error", "retryable", "message"),
    "suspended": ("reason", "state_version", "state_json"),
}


def encode_record(record: Record) -> str:
    """The canonical JSON text of a valid record; raises a ``RecordFormatError`` otherwise.

    Every part is validated first, so the text is composed of its parts' encodings (the
    same bytes a JSON encoder gives the whole object, without walking it again)."""
    if not isinstance(record, Record):
        raise InvalidPayload(f"encode_record expects a Record, got {type(record).__name__}")
    record.validate()
    return encode_valid_record(record)


def encode_valid_record(record: Record) -> str:
    """:func:`encode_record` of a record its caller has just validated (a runtime that
    checked the attempt's outcome against its invocation): the same text, checked once."""
    return checked_size(_encode(record, encode_part(record.invocation.input_json)), what="record")


def record_without_input(record: Record) -> str:
    """The canonical text of a validated record with ``null`` for its invocation's input (how
    a store keeps it beside the input it stores once): the input is not encoded at all."""
    return _encode(record, "null")


def record_with_input(text: str, input_json: str, encoded: str | None = None) -> str:
    """The canonical record text of ``text``, a record kept without its input (returned
    unchanged when it holds its input already), with ``input_json`` put back; ``encoded``
    is its JSON string when the caller has it (composed of parts escaped earlier)."""
    at = text.find(INPUT_LEFT_OUT)
    if at < 0:
        return text
    head = at + len(',"input_json":')
    encoded = encode_part(input_json) if encoded is None else encoded
    whole = "".join((text[:head], encoded, text[head + len("null") :]))
    _COMPOSED.append((whole, text, input_json))
    return whole


def record_input_removed(text: str) -> str:
    """A canonical record ``text`` with ``null`` for its input (unchanged when it has none)."""
    if text.find(INPUT_LEFT_OUT) >= 0:
        return text
    start = text.find(',"input_json":"')
    end = text.find(_INPUT_END, start)
    if start < 0 or end < 0:
        return text
    return text[: start + len(',"input_json":')] + "null" + text[end:]


def _encode(record: Record, input_text: str) -> str:
    invocation = record.invocation
    kind = invocation.kind
    return "".join(
        (
            '{"version":',
            encode_part(RECORD_VERSION),
            ',"invocation":{"run_id":',
            encode_part(invocation.run_id),
            ',"step_id":',
            encode_part(invocation.step_id),
            ',"sequence":',
            encode_part(invocation.sequence),
            ',"kind":',
            encode_part(kind.value if isinstance(kind, OperationKind) else kind),
            ',"handler_id":',
            encode_part(invocation.handler_id),
            ',"input_json":',
            input_text,
            '},"input_digest":',
            encode_part(record.input_digest),
            ',"outcome":',
            _outcome_text(record.outcome),
            "}",
        )
    )


def _outcome_text(outcome: Outcome) -> str:
    if isinstance(outcome, Success):
        return '{"success":{"output_json":' + encode_part(outcome.output_json) + "}}"
    if isinstance(outcome, Failure):
        return "".join(
            (
                '{"failure":{"error":',
                encode_part(outcome.error),
                ',"retryable":',
                encode_part(outcome.retryable),
                ',"message":',
                encode_part(outcome.message),
                "}}",
            )
        )
    return "".join(
        (
            '{"suspended":{"reason":',
            encode_part(str(outcome.reason)),
            ',"state_version":',
            encode_part(outcome.state_version),
            ',"state_json":',
            encode_part(outcome.state_json),
            "}}",
        )
    )


def decode_record(text: str | bytes | bytearray) -> Record:
    """Parse and check a record; any valid field order is accepted.

    Raises ``UnknownField``, ``UnsupportedVersion``, ``InvalidPayload``, ``AmbiguousOutcome``
    or ``DigestMismatch`` (all ``RecordFormatError``) and nothing else.
    ``encode_record(decode_record(s)) == s`` for every canonical ``s``.
    """
    data = _parse_composed(text)
    if data is None:
        data = _parse(text)
    _check_version(data)
    _check_fields("record", data, _TOP_FIELDS, required=("invocation", "input_digest"))
    invocation = _decode_invocation(data["invocation"])
    run_id = invocation.run_id if name_problem("run_id", invocation.run_id) is None else None
    digest = data["input_digest"]
    if not isinstance(digest, str):
        raise InvalidPayload(f"input_digest must be a str, got {_json_type(digest)}", run_id=run_id)
    record = Record(invocation, digest, _decode_outcome(data.get("outcome"), run_id))
    record.validate()
    return record


def decode_record_for(text: str, invocation: Invocation) -> Record:
    """:func:`decode_record` of ``text``, a record stored with or without its input, for the
    validated ``invocation`` that holds it: a record kept without its input is checked
    against ``invocation``'s fields and digest instead of having the input put back and
    parsed (the record returned then holds ``invocation`` itself)."""
    if text.find(INPUT_LEFT_OUT) < 0:
        return decode_record(text)
    data = _parse(text)
    stored = data.get("invocation")
    mine = invocation.to_dict()
    mine["input_json"] = None
    if not isinstance(stored, dict) or stored != mine:
        return decode_record(record_with_input(text, invocation.input_json))
    _check_version(data)
    _check_fields("record", data, _TOP_FIELDS, required=("invocation", "input_digest"))
    digest = data["input_digest"]
    if not isinstance(digest, str):
        raise InvalidPayload(
            f"input_digest must be a str, got {_json_type(digest)}", run_id=invocation.run_id
        )
    record = Record(invocation, digest, _decode_outcome(data.get("outcome"), invocation.run_id))
    record.validate()
    return record


def _parse_composed(text: object) -> dict[str, Any] | None:
    """The parsed record of ``text`` when :func:`record_with_input` composed this very
    object lately: its small part parsed and the input put back (the same document, without
    parsing the input's escaped text again); None otherwise."""
    for whole, stripped, input_json in reversed(tuple(_COMPOSED)):
        if whole is text:
            data = _parse(stripped)
            invocation = data.get("invocation")
            if isinstance(invocation, dict) and invocation.get("input_json", "") is None:
                invocation["input_json"] = input_json
                return data
            return None
    return None


def _parse(text: object) -> dict[str, Any]:
    try:
        data = loads_strict_text(text)
    except StrictJsonError as error:
        raise InvalidPayload(f"a record must be one strict JSON document: {error}") from None
    if not isinstance(data, dict):
        raise InvalidPayload(f"a record must be a JSON object, got {_json_type(data)}")
    return data


def _check_version(data: dict[str, Any]) -> None:
    if "version" not in data:
        raise UnsupportedVersion(
            f"the record has no version field; this code reads version {RECORD_VERSION}"
        )
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidPayload(f"version must be an integer, got {_json_type(version)}")
    if version != RECORD_VERSION:
        raise UnsupportedVersion(
            f"record version {version} is not supported; this code reads version "
            f"{RECORD_VERSION} (upgrade zincir to read newer records)"
        )


def _check_fields(
    where: str,
    data: Mapping[str, Any],
    allowed: tuple[str, ...],
    *,
    required: tuple[str, ...],
    run_id: str | None = None,
) -> None:
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise UnknownField(
            f"{where} holds unknown fields {unknown}; version {RECORD_VERSION} defines "
            f"{list(allowed)}",
            run_id=run_id,
        )
    missing = [key for key in required if key not in data]
    if missing:
        raise InvalidPayload(f"{where} is missing fields {missing}", run_id=run_id)


def _decode_invocation(value: object) -> Invocation:
    if not isinstance(value, dict):
        raise InvalidPayload(f"invocation must be a JSON object, got {_json_type(value)}")
    _check_fields("invocation", value, INVOCATION_FIELDS, required=INVOCATION_FIELDS)
    try:
        return Invocation.from_dict(value)
    except InvalidInvocation as error:
        raise InvalidPayload(f"record: {error.detail}") from None


def _decode_outcome(value: object, run_id: str | None) -> Outcome:
    if value is None:
        raise AmbiguousOutcome(
            "the record has no outcome; it needs exactly one of success, failure, suspended",
            run_id=run_id,
        )
    if not isinstance(value, dict):
        raise InvalidPayload(
            f"outcome must be a JSON object, got {_json_type(value)}", run_id=run_id
        )
    _check_fields("outcome", value, tuple(_OUTCOME_FIELDS), required=(), run_id=run_id)
    if len(value) != 1:
        raise AmbiguousOutcome(
            f"the record holds {len(value)} outcomes {list(value)}; it needs exactly one of "
            "success, failure, suspended",
            run_id=run_id,
        )
    ((name, body),) = value.items()
    if not isinstance(body, dict):
        raise InvalidPayload(
            f"outcome {name} must be a JSON object, got {_json_type(body)}", run_id=run_id
        )
    fields = _OUTCOME_FIELDS[name]
    required = tuple(field for field in fields if field != "message")
    _check_fields(f"outcome {name}", body, fields, required=required, run_id=run_id)
    if name == "success":
        return Success(body["output_json"])
    if name == "failure":
        return Failure(body["error"], body["retryable"], body.get("message", ""))
    return Suspended(body["reason"], body["state_version"], body["state_json"])


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
