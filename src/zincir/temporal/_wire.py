"""How a record travels through Temporal: its canonical text, deflated when large.

Temporal stores activity and workflow results in the workflow history, where one payload is
bounded by the namespace's blob size limit (2 MiB by default) and one gRPC message by 4 MiB.
A record is its canonical JSON text (it starts with ``{``); a record whose text exceeds
``COMPRESS_ABOVE`` travels as ``zlib:`` + base64 of its deflated UTF-8 bytes. Pure functions
with no I/O, so the workflow sandbox may import this module.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Final

from .._errors import InvalidPayload, RecordFormatError
from ..contract import Failure, Invocation, Outcome, Record, decode_record, encode_record

__all__ = [
    "COMPRESS_ABOVE",
    "DEFAULT_MAX_RECORD_BYTES",
    "WIRE_LIMIT",
    "decode_wire",
    "encode_wire",
    "record_wire",
]

DEFAULT_MAX_RECORD_BYTES: Final = 8 * 1024 * 1024
"""Largest canonical record accepted (8 MiB); larger ones become a ``RecordTooLarge`` failure."""

COMPRESS_ABOVE: Final = 256 * 1024
"""Records whose canonical text is longer than this travel deflated."""

WIRE_LIMIT: Final = 2 * 1024 * 1024 - 64 * 1024
"""Largest wire text: under Temporal's default 2 MiB payload limit, with room for framing."""

_ZLIB: Final = "zlib:"


def encode_wire(record: Record) -> str:
    """The wire text of a valid record (raises ``RecordFormatError`` for an invalid one)."""
    text = encode_record(record)
    if len(text) <= COMPRESS_ABOVE:
        return text
    packed = zlib.compress(text.encode("utf-8"), 6)
    return _ZLIB + base64.b64encode(packed).decode("ascii")


def decode_wire(wire: object, *, limit: int = DEFAULT_MAX_RECORD_BYTES * 2) -> Record:
    """The record in a wire text; raises a ``RecordFormatError`` for anything malformed."""
    if not isinstance(wire, str):
        raise InvalidPayload(
            f"a Temporal result must be a record string, got {type(wire).__name__}"
        )
    if wire.startswith(_ZLIB):
        try:
            packed = base64.b64decode(wire[len(_ZLIB) :].encode("ascii"), validate=True)
            inflater = zlib.decompressobj()
            data = inflater.decompress(packed, limit + 1)
        except (binascii.Error, ValueError, zlib.error) as error:
            raise InvalidPayload(f"a compressed record from Temporal is corrupt: {error}") from None
        if len(data) > limit or inflater.unconsumed_tail:
            raise InvalidPayload(f"a compressed record from Temporal inflates beyond {limit} bytes")
        return decode_record(data)
    return decode_record(wire)


def record_wire(invocation: Invocation, outcome: Outcome, *, max_record_bytes: int) -> str:
    """The wire text of ``invocation``'s record; an unfit outcome becomes a failure record.

    An outcome that does not validate becomes ``InvalidOutcome``; a record whose canonical
    text exceeds ``max_record_bytes``, or whose wire text exceeds Temporal's payload limit,
    becomes ``RecordTooLarge``. Neither is retryable: the same handler would do it again.
    """
    try:
        record = Record.for_invocation(invocation, outcome)
        text = encode_record(record)
    except RecordFormatError as error:
        return encode_wire(
            Record.for_invocation(invocation, Failure("InvalidOutcome", False, error.detail[:4000]))
        )
    size = len(text.encode("utf-8"))
    if size > max_record_bytes:
        return _too_large(
            invocation,
            f"the record is {size} bytes; the limit is {max_record_bytes} "
            "(max_record_bytes): store large outputs elsewhere and return a reference",
        )
    wire = encode_wire(record)
    if len(wire) > WIRE_LIMIT:
        return _too_large(
            invocation,
            f"the record is {size} bytes and {len(wire)} bytes compressed; "
            f"a Temporal payload holds at most {WIRE_LIMIT}: store large outputs elsewhere "
            "and return a reference",
        )
    return wire


def _too_large(invocation: Invocation, message: str) -> str:
    return encode_wire(Record.for_invocation(invocation, Failure("RecordTooLarge", False, message)))
