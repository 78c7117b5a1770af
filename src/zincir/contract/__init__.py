"""The operation contract: invocations, records and their canonical JSON form.

The payload documents each operation kind carries are in ``zincir.contract.payloads`` (also
importable as ``zincir.payloads``).
"""

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
    "MAX_ID_BYTES",
    "MAX_SEQUENCE",
    "RECORD_VERSION",
    "Failure",
    "Invocation",
    "OperationKind",
    "Outcome",
    "Record",
    "Success",
    "SuspendReason",
    "Suspended",
    "decode_record",
    "encode_record",
]
