"""What both restart stores check before they touch anything: ids, revision, payload, bound."""

from __future__ import annotations

import json
from typing import Any, Final

from .._errors import InvalidPayload, PayloadTooLarge
from .._json import MAX_DOCUMENT_BYTES, StrictJsonError, dumps, loads_strict
from .._validate import check_count, check_id, check_sequence
from ._protocol import RestartCheckpoint

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "canonical",
    "check_key",
    "check_max_payload",
    "checkpoint",
    "encode_payload",
]

DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
"""The default bound on a checkpoint's payload as JSON: a cursor, not a data store."""


def check_key(run_id: object, checkpoint_id: object) -> tuple[str, str]:
    """A valid (run id, checkpoint id), else InvalidInput."""
    run = check_id(run_id, "a run id")
    return run, check_id(checkpoint_id, "a checkpoint id", run_id=run)


def check_max_payload(value: object) -> int:
    """A payload bound in 1..16 MiB (zincir stores no larger JSON document)."""
    return check_count(value, "max_payload_bytes", maximum=MAX_DOCUMENT_BYTES)


def encode_payload(
    run_id: object, checkpoint_id: object, revision: object, payload: Any, max_bytes: int
) -> tuple[str, str, int, str]:
    """The checked key and revision and the payload's JSON text, before anything is written.

    InvalidInput for a bad id or revision, NotJsonSerializable for a payload JSON cannot
    hold, PayloadTooLarge past ``max_bytes``.
    """
    run, checkpoint_id = check_key(run_id, checkpoint_id)
    checked = check_sequence(revision, "revision", run_id=run)
    what = f"the payload of checkpoint {checkpoint_id!r}"
    text = dumps(payload, what=what, run_id=run, convert=True)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{what} is {size:,} bytes as JSON, over this store's {max_bytes:,}-byte bound; "
            "keep large data elsewhere and checkpoint a reference to it",
            run_id=run,
        )
    return run, checkpoint_id, checked, text


def canonical(value: Any) -> str:
    """One spelling of a JSON value (keys sorted): two payloads are the same when their
    spellings are, so key order does not matter while ``1``, ``1.0`` and ``true`` differ."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def checkpoint(
    run_id: str, checkpoint_id: str, revision: int, payload_json: str
) -> RestartCheckpoint:
    """The checkpoint a stored row or file holds; InvalidPayload if its JSON is damaged."""
    try:
        payload = loads_strict(payload_json)
    except StrictJsonError as error:
        raise InvalidPayload(
            f"the stored payload of checkpoint {checkpoint_id!r} is not JSON ({error})",
            run_id=run_id,
        ) from None
    return RestartCheckpoint(run_id, checkpoint_id, revision, payload)
