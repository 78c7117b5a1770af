"""One rule for the values a caller hands back: a tool's result, a workflow step's result,
a tool result recorded by hand, a run's result and a restart payload are stored in their
JSON form (pydantic's ``to_jsonable_python``), and every replay returns that form; a value
pydantic cannot serialise is refused the same way on each path, naming its type and run."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import zincir
from tests.agent.reference import call, request_number, returns
from zincir import AgentContext, NotJsonSerializable, ToolCall
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart
from zincir.restart import SQLRestartStore
from zincir.store import Store
from zincir.workflow import WorkflowContext

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STAMP = "2026-01-02T03:04:05Z"


class Point(BaseModel):
    x: int
    when: datetime


@dataclasses.dataclass
class Item:
    name: str
    tags: set[str]


class Opaque:
    """Neither JSON data nor anything pydantic can serialise."""


CONVERTED: list[tuple[str, Any, Any]] = [
    ("datetime", WHEN, STAMP),
    ("set", {3, 1, 2}, [1, 2, 3]),
    ("model", Point(x=1, when=WHEN), {"x": 1, "when": STAMP}),
    ("dataclass", Item("a", {"t"}), {"name": "a", "tags": ["t"]}),
    ("nested", {"at": [WHEN, frozenset({7})], "p": Point(x=2, when=WHEN)}, None),
]
NESTED = {"at": [STAMP, [7]], "p": {"x": 2, "when": STAMP}}
IDS = [case for case, _, _ in CONVERTED]


def expected(form: Any) -> Any:
    return NESTED if form is None else form


def refused(error: pytest.ExceptionInfo[BaseException], run_id: str) -> None:
    """The error names the type it could not store and the run."""
    text = str(error.value)
    assert "Opaque" in text and f"[run {run_id}]" in text, text
    assert "pydantic can serialise" in text


# -- a workflow step ------------------------------------------------------------------


@pytest.mark.parametrize(("case", "value", "form"), CONVERTED, ids=IDS)
async def test_a_step_result(store: Store, case: str, value: Any, form: Any) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        first = await wf.step("s", lambda: value)
    async with await WorkflowContext.open(store, "wf") as wf:
        again = await wf.step("s", lambda: pytest.fail("a replay runs nothing"))
    assert first == again == expected(form)


async def test_a_step_result_that_cannot_be_stored(store: Store) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(NotJsonSerializable) as error:
            await wf.step("s", lambda: {"o": Opaque()})
        refused(error, "wf")
        assert await wf.step("s", lambda: "fine") == "fine"  # nothing was stored


# -- AgentContext: a recorded tool result and the run's result -------------------------


@pytest.mark.parametrize(("case", "value", "form"), CONVERTED, ids=IDS)
async def test_a_recorded_tool_result_and_a_run_result(
    store: Store, case: str, value: Any, form: Any
) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="r")
    await ctx.record_response("x", [ToolCall("c1", "t")])
    await ctx.record_tool_result("c1", value)
    await ctx.complete({"answer": value})
    events = await store.list_events("r")
    assert [e.payload["result"] for e in events if e.type == "tool_result"] == [expected(form)]
    run = await store.get_run("r")
    assert run is not None and zincir._json.loads_strict(run["result"]) == {  # noqa: SLF001
        "answer": expected(form)
    }


async def test_a_recorded_result_that_cannot_be_stored(store: Store) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="r")
    await ctx.record_response("x", [ToolCall("c1", "t")])
    with pytest.raises(NotJsonSerializable) as error:
        await ctx.record_tool_result("c1", [Opaque()])
    refused(error, "r")
    with pytest.raises(NotJsonSerializable) as error:
        await ctx.complete(Opaque())
    refused(error, "r")
    assert [c.id for c in await ctx.pending_tools()] == ["c1"]
    await ctx.close()


# -- a restart checkpoint's payload ----------------------------------------------------


@pytest.mark.parametrize(("case", "value", "form"), CONVERTED, ids=IDS)
async def test_a_restart_payload(store: Store, case: str, value: Any, form: Any) -> None:
    restart = SQLRestartStore(store)
    saved = await restart.save("r", "cursor", 1, {"v": value})
    loaded = await restart.load("r", "cursor")
    assert loaded is not None and saved.payload == loaded.payload == {"v": expected(form)}
    again = await restart.save("r", "cursor", 1, {"v": value})  # the same revision again
    assert again.payload == {"v": expected(form)}


async def test_a_restart_payload_that_cannot_be_stored(store: Store) -> None:
    restart = SQLRestartStore(store)
    with pytest.raises(NotJsonSerializable) as error:
        await restart.save("r", "cursor", 1, {"v": Opaque()})
    refused(error, "r")
    assert await restart.load("r", "cursor") is None


# -- a tool's result, direct and durable -----------------------------------------------

HANDLERS = Handlers(model_request="request", tool_call="tools")


def agent_returning(value: Any) -> tuple[Agent, list[Any]]:
    seen: list[Any] = []

    @tool
    async def look() -> Any:
        """Return the value under test."""
        return value

    def script(request: ModelRequest) -> ModelResponse:
        if request_number(request) == 0:
            return ModelResponse(parts=[call("c1", "look")])
        seen.extend(returns(request))
        return ModelResponse(parts=[TextPart(text="done")])

    return Agent(FunctionModel(script), name="looker", tools=[look]), seen


def binding(store: Store, agent: Agent, run_id: str) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    return DurableBinding(zincir.LocalRuntime(store, registry), run_id, HANDLERS)


def tool_return(result: zincir.agent.AgentRunResult) -> Any:
    (content,) = [
        part.content
        for message in result.messages
        for part in message.parts
        if isinstance(part, zincir.payloads.ToolReturnPart)
    ]
    return content


@pytest.mark.parametrize(("case", "value", "form"), CONVERTED, ids=IDS)
async def test_a_tool_result(store: Store, case: str, value: Any, form: Any) -> None:
    agent, seen = agent_returning(value)
    direct = await agent.run("go")
    assert seen == [expected(form)] and tool_return(direct) == expected(form)
    first = await agent.run("go", durable=binding(store, agent, "t"))
    replayed = await agent.run("go", durable=binding(store, agent, "t"))
    assert seen == [expected(form)] * 2  # the replay asked the model nothing
    assert tool_return(first) == tool_return(replayed) == expected(form)


async def test_a_tool_result_that_cannot_be_stored(store: Store) -> None:
    agent, _ = agent_returning({"o": Opaque()})
    with pytest.raises(NotJsonSerializable) as direct:
        await agent.run("go")
    assert "Opaque" in str(direct.value) and "the result of tool 'look'" in str(direct.value)
    with pytest.raises(zincir.agent.DurableOperationFailed) as error:
        await agent.run("go", durable=binding(store, agent, "t"))
    refused(error, "t")
    assert "NotJsonSerializable" in str(error.value)
