"""The conversation each model request carries, built only from deterministic data.

The same conversation always yields the same ``ModelRequest`` bytes (no timestamps, no
random ids), so a replay finds the stored record of every request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..contract.payloads import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolDefinition,
    ToolReturnPart,
    Usage,
)

__all__ = ["Conversation", "add_usage", "response_text", "tool_calls"]


class Conversation:
    """Instructions as a ``system`` message, the prompt as ``user``, then each exchange."""

    def __init__(self, instructions: str | None, prompt: str) -> None:
        self.messages: list[Message] = []
        if instructions:
            self.messages.append(Message(role="system", parts=(TextPart(text=instructions),)))
        self.messages.append(Message(role="user", parts=(TextPart(text=prompt),)))

    def request(self, model: str, tools: Sequence[ToolDefinition]) -> ModelRequest:
        """The next request: the whole conversation so far and the tools on offer."""
        return ModelRequest(model=model, messages=tuple(self.messages), tools=tuple(tools))

    def add_response(self, response: ModelResponse) -> None:
        """The model's response, as one ``assistant`` message."""
        self.messages.append(Message(role="assistant", parts=tuple(response.parts)))

    def add_tool_returns(self, returns: Iterable[ToolReturnPart]) -> None:
        """Each tool result as one ``tool`` message, in call order."""
        self.messages.extend(Message(role="tool", parts=(part,)) for part in returns)

    def add_messages(self, messages: Iterable[Message]) -> None:
        """Follow-up messages a tool asked for."""
        self.messages.extend(messages)


def tool_calls(response: ModelResponse) -> list[ToolCallPart]:
    """The tool calls of a response, in their order."""
    return [part for part in response.parts if isinstance(part, ToolCallPart)]


def response_text(response: ModelResponse) -> str:
    """The text of a response (its text parts, joined)."""
    return "".join(part.text for part in response.parts if isinstance(part, TextPart))


def add_usage(total: Usage, more: Usage) -> Usage:
    """The sum of two usages, field by field."""
    details = dict(total.details)
    for key, value in more.details.items():
        details[key] = details.get(key, 0) + value
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
        details=details,
    )
