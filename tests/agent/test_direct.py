"""The direct path: the loop, tools, validation retries and bad model responses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reference import build, call, lines, parallel, returns
from zincir.agent import Agent, FunctionModel, Tool, ToolRetriesExhausted, Toolset, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolReturnPart


def text(value: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text=value)])


async def test_model_tools_model_final_text(tmp_path: Path) -> None:
    log = tmp_path / "log"
    result = await build(log).run("Use both tools.")
    assert result.output == "done: first=1 + second=2"
    assert lines(log) == ["model 0", "tool first 1", "model 1", "tool second 2", "model 2"]
    assert [m.role for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.usage.input_tokens == 30 and result.paused is None


async def test_concurrent_tools_return_in_call_order() -> None:
    started: list[str] = []

    @tool
    async def slow(label: str) -> str:
        started.append(label)
        await asyncio.sleep(0.05)
        return label

    @tool
    async def fast(label: str) -> str:
        started.append(label)
        return label

    def model(request: ModelRequest) -> ModelResponse:
        if not returns(request):
            return ModelResponse(parts=[call("1", "slow", label="s"), call("2", "fast", label="f")])
        return text(",".join(str(item) for item in returns(request)))

    result = await Agent(FunctionModel(model), tools=[slow, fast]).run("go")
    assert started == ["s", "f"]
    assert result.output == "s,f"


def test_schema_comes_from_the_signature() -> None:
    @tool(requires_approval=True)
    async def refund(order_id: str, amount_cents: int = 0) -> dict[str, Any]:
        """Refund an order.

        Longer text the model does not need.
        """
        return {}

    definition = refund.definition()
    assert definition.name == "refund" and definition.description == "Refund an order."
    assert definition.parameters["required"] == ["order_id"]
    assert definition.parameters["properties"]["amount_cents"]["type"] == "integer"
    assert refund.requires_approval and refund.origin.value == "application"
    assert Tool(lambda: 1, name="x", schema={"type": "object"}).schema == {"type": "object"}
    with pytest.raises(zincir.InvalidInput):
        Tool(lambda *args: 1, name="star")


async def test_invented_tool_and_bad_arguments_go_back_as_retry_prompts(tmp_path: Path) -> None:
    seen: list[list[Any]] = []

    def script(number: int, request: ModelRequest) -> ModelResponse:
        seen.append(returns(request))
        if number == 0:
            return ModelResponse(parts=[call("c0", "invented", n=1)])
        if number == 1:
            return ModelResponse(parts=[call("c1", "first", n="not a number")])
        if number == 2:
            return ModelResponse(parts=[call("c2", "first", n=3)])
        return text("ok")

    log = tmp_path / "log"
    result = await build(log, script=script).run("go")
    assert result.output == "ok"
    prompts = [
        part
        for message in result.messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert [p.is_error for p in prompts] == [True, True, False]
    assert "unknown tool 'invented'" in str(prompts[0].content)
    assert "first, second" in str(prompts[0].content)
    assert "n:" in str(prompts[1].content)
    assert [line for line in lines(log) if line.startswith("tool")] == ["tool first 3"]


async def test_retry_prompts_are_bounded(tmp_path: Path) -> None:
    def script(number: int, request: ModelRequest) -> ModelResponse:
        return ModelResponse(parts=[call(f"c{number}", "first", n="bad")])

    agent = build(tmp_path / "log", script=script)
    with pytest.raises(ToolRetriesExhausted, match="'first'"):
        await agent.run("go")
    assert lines(tmp_path / "log") == ["model 0", "model 1", "model 2", "model 3"]


@pytest.mark.parametrize("answer", ["plain text", {"parts": [{"type": "image"}]}, None])
async def test_a_response_that_is_not_a_document_is_a_clear_error(answer: Any) -> None:
    agent = Agent(FunctionModel(lambda request: answer))
    with pytest.raises(zincir.InvalidDocument, match="model 'function'"):
        await agent.run("go")


async def test_dynamic_toolset_offers_tools_per_request() -> None:
    @tool
    def echo(value: str) -> str:
        return value

    offered: list[int] = []

    def pick(context: Any) -> list[Tool]:
        offered.append(context.step)
        return [echo]

    def model(request: ModelRequest) -> ModelResponse:
        if not returns(request):
            return ModelResponse(parts=[call("1", "echo", value="hi")])
        return text(str(returns(request)[0]))

    agent = Agent(FunctionModel(model), toolsets=[Toolset.dynamic(pick)])
    assert (await agent.run("go")).output == "hi"
    assert offered == [0, 1]


async def test_parallel_reference(tmp_path: Path) -> None:
    result = await build(tmp_path / "log", script=parallel).run("go")
    assert result.output == "done: first=1 + second=2"


def test_duplicate_tool_names_are_refused() -> None:
    @tool
    def same() -> int:
        return 1

    with pytest.raises(zincir.InvalidInput, match="two tools"):
        Agent(FunctionModel(lambda r: text("x")), tools=[same, Tool(lambda: 2, name="same")])


async def test_a_tool_that_requires_approval_is_never_run_unapproved() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        ran.append(order_id)
        return order_id

    agent = Agent(
        FunctionModel(lambda request: ModelResponse(parts=[call("c", "refund", order_id="A")])),
        tools=[refund],
    )
    result = await agent.run("go")
    assert result.paused is not None and [c.call_id for c in result.paused.calls] == ["c"]
    assert ran == []
