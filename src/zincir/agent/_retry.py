"""Retries of a failed model request: deterministic full jitter, ``Retry-After`` honoured.

The delay before retry ``r`` of model request ``n`` is ``u * backoff_cap(r)``, where ``u``
in [0, 1) comes from SHA-256 of (run id, r, n): a replay computes the same ``RetryDelay``
document, so the ``retry.delay`` record it finds matches. A provider's ``Retry-After`` (an
error's ``retry_after`` attribute, or ``Retry-After: <seconds> s`` in a persisted failure's
message) is a floor, bounded by ``MAX_RETRY_AFTER``. The document also carries the
provider's HTTP status and request id when the failure's message names them (the form
``ProviderError`` writes).

A tool call that fails retryably (``RetryTool``) waits the same way; its jitter also takes
the call's id, and its document names the call (``tool_call_id``, ``tool_name``).

Defaults: ``DEFAULT_MODEL_RETRY`` (first delay up to 1 s, doubling, each at most 30 s,
until at least 10 minutes were waited; at most ``MAX_RETRIES`` attempts) and
``DEFAULT_TOOL_RETRY`` (up to 1 s, doubling, at most 30 s, 8 attempts).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import timedelta
from typing import Final

from pydantic import JsonValue

from .._errors import OperationFailed
from ..contract.payloads import RetryDelay
from ..durable import RetryPolicy
from ..durable._retry import failure_retry_after
from ._identity import MAX_RETRIES

__all__ = [
    "DEFAULT_MODEL_RETRY",
    "DEFAULT_TOOL_RETRY",
    "MAX_RETRY_AFTER",
    "jitter_fraction",
    "provider_metadata",
    "provider_retry_after",
    "retry_document",
]

MAX_RETRY_AFTER: Final = timedelta(hours=1)
DEFAULT_MODEL_RETRY: Final = RetryPolicy(
    max_attempts=MAX_RETRIES,
    initial_interval=timedelta(seconds=1),
    backoff=2.0,
    max_interval=timedelta(seconds=30),
    max_elapsed=timedelta(minutes=10),
)
"""``Agent(retry=None)``: retryable model failures are retried until at least 10 minutes of
delays were waited (about 40 retries on average; the attempts bound is only a backstop)."""
DEFAULT_TOOL_RETRY: Final = RetryPolicy(
    max_attempts=8,
    initial_interval=timedelta(seconds=1),
    backoff=2.0,
    max_interval=timedelta(seconds=30),
)
"""``Agent(tool_retry=None)``: a tool that raises ``RetryTool`` runs at most 8 times."""
_HTTP_STATUS: Final = re.compile(r"^HTTP ([1-5][0-9]{2})(?:, request id ([!-9;-~]{1,128}))?:")


def jitter_fraction(
    run_id: str, retry: int, failed_request: int, call_id: str | None = None
) -> float:
    """A number in [0, 1) fixed by (run id, retry number, failed request number), and the
    tool call's id for a tool call's retry."""
    key: list[object] = [run_id, retry, failed_request]
    if call_id is not None:
        key.append(call_id)
    seed = json.dumps(key, separators=(",", ":"))
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def provider_retry_after(error: OperationFailed) -> float | None:
    """The provider's ``Retry-After`` in seconds, bounded, or None when it sent none."""
    value = getattr(error, "retry_after", None)
    seconds: float | None = None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = failure_retry_after(error.message)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER.total_seconds())


def provider_metadata(error: OperationFailed, retry_after: float | None) -> dict[str, JsonValue]:
    """What the provider said about the failure, as far as its persisted message keeps it:
    the HTTP status, the provider's request id and ``Retry-After`` (a few bounded entries)."""
    metadata: dict[str, JsonValue] = {}
    found = _HTTP_STATUS.match(error.message or "")
    if found is not None:
        metadata["http_status"] = int(found.group(1))
        if found.group(2):
            metadata["request_id"] = found.group(2)
    if retry_after is not None:
        metadata["retry_after_seconds"] = retry_after
    return metadata


def retry_document(
    policy: RetryPolicy,
    *,
    run_id: str,
    retry: int,
    failed_request: int,
    error: OperationFailed,
    cumulative_before: float,
    call: tuple[str, str] | None = None,
) -> RetryDelay:
    """The ``retry_delay`` input before retry ``retry`` (1-based) of ``failed_request``, or
    of the tool call ``call`` (its id and tool name) of that request's response."""
    cap = policy.delay(retry).total_seconds()
    call_id = None if call is None else call[0]
    delay = round(jitter_fraction(run_id, retry, failed_request, call_id) * cap, 6)
    retry_after = provider_retry_after(error)
    if retry_after is not None:
        delay = max(delay, retry_after)
    metadata = provider_metadata(error, retry_after)
    if call is not None:
        metadata.update(tool_call_id=call[0], tool_name=call[1])
    return RetryDelay(
        retry=retry,
        failed_request=failed_request,
        delay_seconds=delay,
        cumulative_delay_seconds=max(round(cumulative_before + delay, 6), delay),
        error=error.error,
        retry_after_seconds=retry_after,
        provider_metadata=metadata,
    )
