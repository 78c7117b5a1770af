"""The operation contract: invocations, records and their canonical JSON form (SPEC §1)."""

from ._codec import RECORD_VERSION, decode_record, encode_record
from ._invocation import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_ID_BYTES,
    MAX_SEQUENCE,
    Invocation,
    OperationKind,
)
from ._record import Failure, Outcome, Record, Success, Suspended, SuspendReason

__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "Failure",
    "Invocation",
    "MAX_ID_BYTES",
    "MAX_SEQUENCE",
    "OperationKind",
    "Outcome",
    "RECORD_VERSION",
    "Record",
    "Success",
    "SuspendReason",
    "Suspended",
    "decode_record",
    "encode_record",
]
