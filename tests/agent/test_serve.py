"""``serve``: the worker-side handlers, called through a runtime as a worker would be."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.reference import call, returns
from tests.helpers import select
from zincir.agent import Agent, AgentHooks, FunctionModel, Handlers, ToolOrigin, serve, tool
from zincir.payloads import (
    ApprovalDecision,
    ApprovalRequest,
    EventDelivery,
    ModelRequest,
    ModelResponse,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolReturnPart,
    Usage,
)

ALL = Handlers(
    model_request="m",
    model_stream="s",
    tool_call="t",
    mcp_request="p",
    retry_delay="r",
    approval_resume="a",
    event_delivery="e",
)


def chunked(pieces: list[str]) -> Any:
    async def stream(request: ModelRequest) -> AsyncIterator[StreamPart]:
        yield PartStart(index=0, part_kind="text")
        for piece in pieces:
            yield PartDelta(index=0, delta=piece)
        yield PartEnd(index=0)
        yield PartStart(index=1, part_kind="tool_call", tool_call_id="c", tool_name="x")
        yield PartDelta(index=1, delta='{"a":')
        yield PartDelta(index=1, delta="1}")
        yield PartEnd(index=1)
        yield StreamUsage(usage=Usage(output_tokens=3))

    return stream


def invocation(kind: zincir.OperationKind, handler: str, document: Any, seq: int = 0) -> Any:
    return zincir.Invocation(
        run_id="w",
        step_id="s",
        sequence=seq,
        kind=kind,
        handler_id=handler,
        input_json=document.to_json(),
    )


def test_serve_registers_one_handler_per_configured_id() -> None:
    registry = zincir.HandlerRegistry()
    serve(registry, Agent(FunctionModel(lambda r: None)), ALL)
    assert len(registry) == 7
    assert (zincir.OperationKind.MODEL_STREAM, "s") in registry


@pytest.mark.parametrize("pieces", [["hello world"], ["hel", "lo ", "world"]])
async def test_a_streamed_response_is_assembled_whatever_the_chunks(
    durable: Durable, pieces: list[str]
) -> None:
    model = FunctionModel(lambda r: None, stream_fn=chunked(pieces))
    registry = zincir.HandlerRegistry()
    serve(registry, Agent(model), Handlers(model_stream="s"))
    runtime = zincir.LocalRuntime(durable.store, registry)
    request = ModelRequest(messages=[])
    record = await runtime.execute(invocation(zincir.OperationKind.MODEL_STREAM, "s", request))
    assert isinstance(record.outcome, zincir.Success)
    response = ModelResponse.from_json(record.outcome.output_json)
    assert response.parts[0] == TextPart(text="hello world")
    assert response.parts[1] == call("c", "x", a=1)
    assert response.usage.output_tokens == 3


async def test_approval_and_event_handlers(durable: Durable) -> None:
    delivered: list[str] = []
    agent = Agent(FunctionModel(lambda r: None), event_sink=lambda e: delivered.append(e.name))
    registry = zincir.HandlerRegistry()
    serve(
        registry,
        agent,
        ALL,
        approver=lambda request: ApprovalDecision(decision="deny", reason="no"),
    )
    runtime = zincir.LocalRuntime(durable.store, registry)
    approval = ApprovalRequest(
        call=call("c", "refund"),
        arguments={},
        execution="approval",
        proposed=ApprovalDecision(decision="approve"),
    )
    record = await runtime.execute(invocation(zincir.OperationKind.APPROVAL_RESUME, "a", approval))
    assert isinstance(record.outcome, zincir.Success)
    assert json.loads(record.outcome.output_json)["decision"] == "deny"
    event = EventDelivery(name="shipped")
    delivery = invocation(zincir.OperationKind.EVENT_DELIVERY, "e", event, seq=1)
    assert await runtime.execute(delivery) == await runtime.execute(delivery)
    assert delivered == ["shipped"]


async def test_mcp_tools_route_through_mcp_request(durable: Durable, tmp_path: Path) -> None:
    @tool(origin=ToolOrigin.MCP)
    def search(query: str) -> list[str]:
        return [query.upper()]

    def model(request: ModelRequest) -> ModelResponse:
        if not returns(request):
            return ModelResponse(parts=[call("c", "search", query="abc")])
        return ModelResponse(parts=[TextPart(text=str(returns(request)[0]))])

    agent = Agent(FunctionModel(model), tools=[search])
    handlers = Handlers(model_request="m", mcp_request="p")
    result = await agent.run("go", durable=durable.binding(agent, handlers=handlers))
    assert result.output == "['ABC']"
    assert select(
        durable.target, "SELECT step_id, sequence, kind FROM operations ORDER BY 2, 1"
    ) == [
        ("mcp.request", 0, "mcp_request"),
        ("model.request", 0, "model_request"),
        ("model.request", 1, "model_request"),
    ]


async def test_hooks_observe_locally() -> None:
    seen: list[str] = []

    class Recorder(AgentHooks):
        async def on_model_request(self, number: int, request: ModelRequest) -> None:
            seen.append(f"request {number}")

        async def on_model_response(self, number: int, response: ModelResponse) -> None:
            seen.append(f"response {number}")

        async def on_tool_return(self, part: ToolReturnPart) -> None:
            seen.append(f"return {part.tool_call_id}")

    @tool
    def ping() -> str:
        return "pong"

    def model(request: ModelRequest) -> ModelResponse:
        if not returns(request):
            return ModelResponse(parts=[call("c", "ping")])
        return ModelResponse(parts=[TextPart(text="ok")])

    await Agent(FunctionModel(model), tools=[ping], hooks=[Recorder()]).run("go")
    assert seen == ["request 0", "response 0", "return c", "request 1", "response 1"]
