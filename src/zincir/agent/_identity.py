"""Step ids and sequences: every identity comes from deterministic loop state.

A model request uses its number (0, 1, 2, …); a tool call ``request_number * 1000 +
position`` (its index among that response's calls), fixed before any tool starts.
"""

from __future__ import annotations

from typing import Final

from .._errors import InvalidDocument

__all__ = [
    "MAX_CALLS_PER_RESPONSE",
    "MCP_REQUEST",
    "MODEL_REQUEST",
    "MODEL_STREAM",
    "TOOL_CALL",
    "tool_sequence",
]

MODEL_REQUEST: Final = "model.request"
MODEL_STREAM: Final = "model.stream"
TOOL_CALL: Final = "tool.call"
MCP_REQUEST: Final = "mcp.request"
MAX_CALLS_PER_RESPONSE: Final = 1000


def tool_sequence(request_number: int, position: int, *, run_id: str | None = None) -> int:
    """The sequence of the tool call at ``position`` in the response to ``request_number``."""
    if not 0 <= position < MAX_CALLS_PER_RESPONSE:
        raise InvalidDocument(
            f"model response #{request_number} asks for more than {MAX_CALLS_PER_RESPONSE} "
            "tool calls; a response may hold at most that many",
            run_id=run_id,
        )
    return request_number * MAX_CALLS_PER_RESPONSE + position
