"""The result a completed durable run keeps: composed of its messages' texts, the same
document as encoding the whole result, and read back as the same result."""

from __future__ import annotations

from typing import Any

import pytest

from zincir import NotJsonSerializable
from zincir._json import MAX_NESTING, dumps
from zincir.agent._result import AgentRunResult, result_from_stored, stored_result
from zincir.contract.payloads import Message, TextPart, ToolReturnPart, Usage


def nested(levels: int) -> Any:
    value: Any = "deep"
    for _ in range(levels):
        value = [value]
    return value


def whole_text(result: AgentRunResult) -> str:
    return dumps(
        {
            "output": result.output,
            "messages": [message.to_dict() for message in result.messages],
            "usage": result.usage.to_dict(),
        }
    )


def result_with(content: Any) -> AgentRunResult:
    tool = Message(
        role="tool", parts=[ToolReturnPart(tool_call_id="c", tool_name="t", content=content)]
    )
    user = Message(role="user", parts=[TextPart(text="Check é the items.")])
    return AgentRunResult("done", (user, tool), Usage(input_tokens=7, output_tokens=3))


@pytest.mark.parametrize(
    "content",
    [
        {"rows": [1, 2.5, None, True]},
        "[{" * 127,  # brackets inside a string are no nesting
        [nested(2)] * 130,  # many brackets, shallow
        nested(MAX_NESTING - 5),  # exactly as deep as a stored result may be
    ],
    ids=["plain", "brackets-in-text", "wide", "deepest-that-fits"],
)
def test_the_stored_result_is_the_whole_result_encoded(content: Any) -> None:
    result = result_with(content)
    text = stored_result(result, "run-1")
    assert text == whole_text(result)
    back = result_from_stored(text, "run-1")
    assert (back.output, back.messages, back.usage) == (
        result.output,
        result.messages,
        result.usage,
    )


def test_a_result_nested_deeper_than_the_limit_is_refused() -> None:
    result = result_with(nested(MAX_NESTING - 4))
    with pytest.raises(NotJsonSerializable, match="nested deeper"):
        stored_result(result, "run-1")
