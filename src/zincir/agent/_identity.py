"""Step ids and sequences: every identity comes from deterministic loop state.

A model request uses its number (0, 1, 2, …); a tool call ``request_number * 1000 +
position`` (its index among that response's calls), fixed before any tool starts; a retry
timer ``failed_request_number * 1000 + retry_number``; an approval its call's sequence. A
call asked again because its decision no longer binds the arguments that would run is
decided in its next round: round ``r`` is ``attempt_sequence(call sequence, r)``, and the
tool call it approves moves ``r`` attempts on as well. A tool call retried after a
retryable failure (``RetryTool``) takes ``TOOL_RETRY_STRIDE`` attempts per retry (clear of
the decision rounds), and the ``retry.delay`` timer before it takes that attempt's sequence
of the call.
"""

from __future__ import annotations

from typing import Final

from .._errors import InvalidDocument

__all__ = [
    "APPROVAL_RESUME",
    "ATTEMPT_STRIDE",
    "EVENT_DELIVERY",
    "MAX_CALLS_PER_RESPONSE",
    "MCP_REQUEST",
    "MODEL_REQUEST",
    "MODEL_STREAM",
    "RETRY_DELAY",
    "TOOL_CALL",
    "TOOL_RETRY_STRIDE",
    "attempt_sequence",
    "retry_sequence",
    "tool_retry_attempt",
    "tool_sequence",
]

MODEL_REQUEST: Final = "model.request"
MODEL_STREAM: Final = "model.stream"
TOOL_CALL: Final = "tool.call"
MCP_REQUEST: Final = "mcp.request"
RETRY_DELAY: Final = "retry.delay"
APPROVAL_RESUME: Final = "approval.resume"
EVENT_DELIVERY: Final = "event.delivery"
MAX_CALLS_PER_RESPONSE: Final = 1000
MAX_RETRIES: Final = 1000
TOOL_RETRY_STRIDE: Final = 1000
ATTEMPT_STRIDE: Final = 10**12
"""A later attempt of an identity whose first attempt has a terminal record (a retried
model request, an approved call whose tool first asked for approval, a decision round after
the first) adds ``attempt * ATTEMPT_STRIDE`` to the sequence: ``1000000000003`` is attempt 1
of ``#3``."""


def tool_sequence(request_number: int, position: int, *, run_id: str | None = None) -> int:
    """The sequence of the tool call at ``position`` in the response to ``request_number``."""
    if not 0 <= position < MAX_CALLS_PER_RESPONSE:
        raise InvalidDocument(
            f"model response #{request_number} asks for more than {MAX_CALLS_PER_RESPONSE} "
            "tool calls; a response may hold at most that many",
            run_id=run_id,
        )
    return request_number * MAX_CALLS_PER_RESPONSE + position


def retry_sequence(failed_request: int, retry: int, *, run_id: str | None = None) -> int:
    """The sequence of the ``retry.delay`` timer before retry ``retry`` (1-based)."""
    if not 1 <= retry < MAX_RETRIES:
        raise InvalidDocument(
            f"retry number {retry} is out of range; a request is retried at most "
            f"{MAX_RETRIES - 1} times",
            run_id=run_id,
        )
    return failed_request * MAX_RETRIES + retry


def attempt_sequence(sequence: int, attempt: int, *, run_id: str | None = None) -> int:
    """The sequence of attempt ``attempt`` (0 = the first) of the identity at ``sequence``."""
    if not 0 <= sequence < ATTEMPT_STRIDE:
        raise InvalidDocument(
            f"sequence {sequence} is too large for a retried or resumed attempt",
            run_id=run_id,
        )
    return sequence + attempt * ATTEMPT_STRIDE


def tool_retry_attempt(attempt: int, retry: int) -> int:
    """The attempt of retry ``retry`` (0 = the first run) of a tool call whose first run is
    attempt ``attempt``."""
    return attempt + retry * TOOL_RETRY_STRIDE
