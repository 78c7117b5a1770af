"""Preflight: each missing handler is reported before any model call, with nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest

import zincir
import zincir.payloads
from tests.agent.conftest import Durable
from tests.agent.reference import HANDLERS, build, lines
from tests.helpers import select
from zincir.agent import (
    Agent,
    DurableBinding,
    FunctionModel,
    Handlers,
    Tool,
    ToolOrigin,
    Toolset,
    serve,
    tool,
)
from zincir.payloads import ModelRequest, ModelResponse, TextPart


def answer(request: ModelRequest) -> ModelResponse:
    raise AssertionError("preflight must fail before any model call")


@tool
def lookup(order_id: str) -> str:
    return order_id


@tool(requires_approval=True)
def refund(order_id: str) -> str:
    return order_id


@tool(origin=ToolOrigin.MCP)
def search(query: str) -> str:
    return query


def empty(db: str) -> None:
    for table in ("agent_runs", "events", "operations"):
        assert select(db, f"SELECT COUNT(*) FROM {table}") == [(0,)], table


def agent_with(*tools: Tool, retry: zincir.RetryPolicy | None = None) -> Agent:
    return Agent(FunctionModel(answer), name="pre", tools=tools, retry=retry)


CASES = {
    "model handler not configured": (agent_with(), Handlers(tool_call="t"), "model_request"),
    "tool family not configured": (agent_with(lookup), Handlers(model_request="m"), "tool_call"),
    "mcp family not configured": (
        agent_with(search),
        Handlers(model_request="m", tool_call="t"),
        "mcp_request",
    ),
    "approval not configured": (
        agent_with(lookup, refund),
        Handlers(model_request="m", tool_call="t"),
        "approval_resume",
    ),
    "retry timer not configured": (
        agent_with(retry=zincir.RetryPolicy(max_attempts=3)),
        Handlers(model_request="m", retry_delay=None),
        "retry_delay",
    ),
    "retry timer not configured for the default retries": (
        agent_with(),
        Handlers(model_request="m", retry_delay=None),
        "retry_delay",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_missing_configuration_fails_first(durable: Durable, case: str) -> None:
    agent, handlers, kind = CASES[case]
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    binding = DurableBinding(zincir.LocalRuntime(durable.store, registry), "run-1", handlers)
    with pytest.raises(zincir.MissingDurableHandler, match=kind) as caught:
        await agent.run("go", durable=binding)
    assert caught.value.run_id == "run-1"
    empty(durable.target)


async def test_a_configured_handler_must_be_registered(durable: Durable, tmp_path: Path) -> None:
    agent = build(tmp_path / "log")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, Handlers(model_request="ref-model"))
    binding = DurableBinding(zincir.LocalRuntime(durable.store, registry), "run-1", HANDLERS)
    with pytest.raises(zincir.MissingDurableHandler, match="'ref-tools' is not registered"):
        await agent.run("go", durable=binding)
    empty(durable.target)
    assert lines(tmp_path / "log") == []


async def test_a_dynamic_toolset_must_declare_its_origins(durable: Durable) -> None:
    agent = Agent(FunctionModel(answer), toolsets=[Toolset.dynamic(lambda context: [lookup])])
    with pytest.raises(zincir.MissingDurableToolsetOrigins):
        await agent.run("go", durable=durable.binding(agent))
    empty(durable.target)


async def test_declared_origins_need_their_handlers(durable: Durable) -> None:
    dynamic = Toolset.dynamic(lambda context: [search], durable_origins={"mcp"}, id="found")
    agent = Agent(FunctionModel(answer), toolsets=[dynamic])
    with pytest.raises(zincir.MissingDurableHandler, match="mcp_request"):
        await agent.run("go", durable=durable.binding(agent))
    empty(durable.target)


async def test_rechecked_before_each_model_request(durable: Durable) -> None:
    """A dynamic toolset that starts offering an undeclared origin stops the run there."""
    calls: list[int] = []

    def pick(context: zincir.payloads.RunContext) -> list[Tool]:
        return [lookup] if context.step == 0 else [lookup, search]

    def model(request: ModelRequest) -> ModelResponse:
        calls.append(len(request.messages))
        return ModelResponse(
            parts=[
                zincir.payloads.ToolCallPart(
                    tool_call_id="c", tool_name="lookup", arguments={"order_id": "A"}
                )
            ]
        )

    dynamic = Toolset.dynamic(pick, durable_origins={ToolOrigin.APPLICATION})
    agent = Agent(FunctionModel(model), toolsets=[dynamic])
    with pytest.raises(zincir.MissingDurableToolsetOrigins, match="search"):
        await agent.run("go", durable=durable.binding(agent))
    assert len(calls) == 1


async def test_direct_runs_skip_preflight() -> None:
    agent = Agent(
        FunctionModel(lambda request: ModelResponse(parts=[TextPart(text="hi")])),
        tools=[refund],
        retry=zincir.RetryPolicy(max_attempts=3),
    )
    assert (await agent.run("go")).output == "hi"
