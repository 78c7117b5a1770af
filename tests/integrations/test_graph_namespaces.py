"""Graph namespaces: ``DurableBinding.for_graph_node`` and the identities zincir agent runs
get inside LangGraph nodes (two nodes of one super-step, and a graph killed mid-node with
SIGKILL and resumed), on SQLite and PostgreSQL with the real ``openai`` SDK."""

from __future__ import annotations

import json
import operator
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from unittest import mock

import pytest

pytest.importorskip("langgraph", reason="LangGraph is in the dev extra")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Send  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402

import zincir  # noqa: E402
from tests.agent import openai_server  # noqa: E402
from tests.agent.openai_server import ChatServer, Reply, completion, tool_call  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.integrations.graph_nodes_worker import EFFECTS_ENV, HOLD_ENV, charge  # noqa: E402
from zincir import InvalidInput  # noqa: E402
from zincir.agent import (  # noqa: E402
    Agent,
    DurableBinding,
    Handlers,
    OpenAIChatModel,
    Runner,
    serve,
)
from zincir.integrations.langgraph import node_binding, running_node  # noqa: E402
from zincir.store import OperationKey, Store  # noqa: E402

WORKER = Path(__file__).with_name("graph_nodes_worker.py")
PLAN = {"clerk": ["charge", "hold"], "scout": ["charge"]}
HANDLERS = Handlers(model_request="g.model", tool_call="g.tool")


class GraphServer(ChatServer):
    """Answers by the request itself, whatever order concurrent runs ask in: the tools
    offered name the agent's plan (its tools, one a turn), each tool message moves one turn
    on, and the last answer is ``<prompt> -> <tool results>``."""

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        messages = body["messages"]
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        plan = PLAN["clerk" if "hold" in offered else "scout"]
        prompt = next(str(m["content"]) for m in messages if m["role"] == "user")
        results = [str(m["content"]) for m in messages if m["role"] == "tool"]
        turn = len(results)
        if turn < len(plan):
            call = tool_call(f"call-{turn}", plan[turn], json.dumps({"text": prompt}))
            reply = Reply(completion(tool_calls=[call], finish_reason="tool_calls"))
        else:
            reply = Reply(completion(f"{prompt} -> {', '.join(results)}"))
        self.replies.appendleft(reply)
        return await super()._completions(request)


@pytest.fixture(scope="module")
def running_server() -> Iterator[ChatServer]:
    with mock.patch.object(openai_server, "ChatServer", GraphServer):
        with openai_server.chat_server() as running:
            yield running


@pytest.fixture
async def server(running_server: ChatServer) -> AsyncIterator[ChatServer]:
    running_server.reset()
    yield running_server
    await running_server.close_clients()


@pytest.fixture(autouse=True)
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.txt"
    monkeypatch.setenv(EFFECTS_ENV, str(path))
    monkeypatch.delenv(HOLD_ENV, raising=False)
    return path


def asked(server: ChatServer) -> Counter[tuple[str, int]]:
    """How often the server was asked each (prompt, turn)."""
    counts: Counter[tuple[str, int]] = Counter()
    for body in server.bodies:
        messages = body["messages"]
        prompt = next(str(m["content"]) for m in messages if m["role"] == "user")
        counts[(prompt, sum(1 for m in messages if m["role"] == "tool"))] += 1
    return counts


# -- for_graph_node ------------------------------------------------------------------------


def binding(namespace: str | None = None) -> DurableBinding:
    runtime = zincir.LocalRuntime(mock.Mock(), zincir.HandlerRegistry())
    return DurableBinding(runtime, "run-1", HANDLERS, step_namespace=namespace)


def test_for_graph_node_derives_the_namespace() -> None:
    assert binding().for_graph_node("plan", 3).step_namespace == "graph.plan.step.3"
    derived = binding("outer").for_graph_node("plan", 0)
    assert derived.step_namespace == "outer.graph.plan.step.0"
    assert derived.run_id == "run-1" and derived.handlers == HANDLERS
    assert derived.step_id("model.request") == "outer.graph.plan.step.0.model.request"


def test_node_ids_are_escaped_injectively() -> None:
    names = ["plan v2.1", "plan%20v2%2E1", "a.step.1", "a", "é", "%C3%A9", "x\x00", "_-", "\ud800"]
    spaces = [binding().for_graph_node(name, 1).step_namespace for name in names]
    assert spaces[0] == "graph.plan%20v2%2E1.step.1"
    assert spaces[1] == "graph.plan%2520v2%252E1.step.1"
    assert spaces[2] == "graph.a%2Estep%2E1.step.1"
    assert spaces[4] == "graph.%C3%A9.step.1"
    assert spaces[7] == "graph._-.step.1"
    assert len(set(spaces)) == len(names)
    for space in spaces:
        assert space is not None and space.isascii() and space.isprintable()


@pytest.mark.parametrize("step", [-1, 1.0, "2", True, None])
def test_a_bad_step_is_refused_naming_the_run(step: Any) -> None:
    with pytest.raises(InvalidInput, match="graph step") as caught:
        binding().for_graph_node("plan", step)
    assert caught.value.run_id == "run-1"


@pytest.mark.parametrize("node", ["", None, 3])
def test_a_bad_node_id_is_refused(node: Any) -> None:
    with pytest.raises(InvalidInput, match="node id") as caught:
        binding().for_graph_node(node, 1)
    assert caught.value.run_id == "run-1"


def test_a_too_long_namespace_is_refused() -> None:
    with pytest.raises(InvalidInput, match="limit is 256") as caught:
        binding().for_graph_node("n" * 250, 1)
    assert caught.value.run_id == "run-1"


# -- two nodes of one super-step -----------------------------------------------------------


class Pair(TypedDict, total=False):
    a: str
    b: str


def two_nodes(run: Any) -> Any:
    async def node_a(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": await run("apple")}

    async def node_b(state: dict[str, Any]) -> dict[str, Any]:
        return {"b": await run("pear")}

    builder: Any = StateGraph(Pair)
    builder.add_node("a", node_a)
    builder.add_node("b", node_b)
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge("a", END)
    builder.add_edge("b", END)
    return builder.compile()


async def test_two_nodes_running_one_agent_through_a_runner(
    store: Store, server: ChatServer, effects: Path
) -> None:
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="scout", tools=[charge])
    runner = Runner(store, [agent])
    results: dict[str, Any] = {}

    async def run(prompt: str) -> str:
        result = await runner.run(agent, prompt)
        results[prompt] = result
        return result.output

    state = await two_nodes(run).ainvoke({})
    assert state == {"a": "apple -> charged apple", "b": "pear -> charged pear"}
    apple, pear = results["apple"].run_id, results["pear"].run_id
    assert apple.startswith("scout.graph.a.step.1.") and pear.startswith("scout.graph.b.step.1.")
    runs = {run["id"] for run in await store.list_runs()}
    assert runs == {apple, pear}
    assert await store.get_operation(OperationKey(apple, "graph.a.step.1.model.request", 0))
    assert await store.get_operation(OperationKey(pear, "graph.b.step.1.model.request", 0))
    assert sorted(effects.read_text().splitlines()) == ["charge apple", "charge pear"]
    assert asked(server) == Counter(
        {("apple", 0): 1, ("apple", 1): 1, ("pear", 0): 1, ("pear", 1): 1}
    )


async def test_two_nodes_running_one_agent_on_one_binding(
    store: Store, server: ChatServer, effects: Path
) -> None:
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="scout", tools=[charge])
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    shared = DurableBinding(zincir.LocalRuntime(store, registry), "orders", HANDLERS)
    ran: dict[str, str] = {}

    async def run(prompt: str) -> str:
        result = await agent.run(prompt, durable=shared)
        assert result.run_id is not None
        ran[prompt] = result.run_id
        return result.output

    graph = two_nodes(run)
    state = await graph.ainvoke({})
    assert state == {"a": "apple -> charged apple", "b": "pear -> charged pear"}
    assert ran["apple"].startswith("orders.graph.a.step.1.")
    assert ran["pear"].startswith("orders.graph.b.step.1.")
    for run_id, node in ((ran["apple"], "a"), (ran["pear"], "b")):
        for step, sequence in (("model.request", 0), ("tool.call", 0), ("model.request", 1)):
            key = OperationKey(run_id, f"graph.{node}.step.1.{step}", sequence)
            assert await store.get_operation(key) is not None
    # Outside a graph the binding is used as it is.
    assert (await agent.run("plum", durable=shared)).run_id == "orders"


# -- a graph killed mid-node ---------------------------------------------------------------


def worker(target: str, server: ChatServer, effects: Path, *, hold_env: bool) -> Any:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop(HOLD_ENV, None)
    if hold_env:
        env[HOLD_ENV] = "1"
    return subprocess.Popen(
        [sys.executable, str(WORKER), target, server.base_url, "thread-1", str(effects)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.crash
def test_a_graph_killed_mid_node_resumes_without_calling_anything_twice(
    store_target: str, server: ChatServer, effects: Path
) -> None:
    first = worker(store_target, server, effects, hold_env=True)
    inside: set[str] = set()
    try:
        assert first.stdout is not None
        while len(inside) < 2:
            line = first.stdout.readline()
            assert line, "the worker ended before both nodes were inside their hold tool"
            inside.add(line.split()[-1])
    finally:
        first.send_signal(signal.SIGKILL)
        _, errors = first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL, errors
    assert inside == {"apple", "pear"}
    before = asked(server)
    assert before == Counter({("apple", 0): 1, ("apple", 1): 1, ("pear", 0): 1, ("pear", 1): 1})

    second = worker(store_target, server, effects, hold_env=False)
    out, errors = second.communicate(timeout=120)
    assert second.returncode == 0, errors
    state = json.loads(out.splitlines()[-1])
    assert state == {
        "a": "apple -> charged apple, held apple",
        "b": "pear -> charged pear, held pear",
    }
    # Every model request was sent once; the finished tool ran once, the one cut off twice.
    assert set(asked(server).values()) == {1}
    assert len(server.bodies) == 6
    assert Counter(effects.read_text().splitlines()) == Counter(
        {"charge apple": 1, "charge pear": 1, "hold apple": 2, "hold pear": 2}
    )


class Fanned(TypedDict, total=False):
    cities: list[str]
    done: Annotated[list[str], operator.add]


async def test_sends_to_one_node_and_an_explicit_namespace(
    store: Store, server: ChatServer, effects: Path
) -> None:
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="scout", tools=[charge])
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    shared = DurableBinding(
        zincir.LocalRuntime(store, registry), "fan", HANDLERS, step_namespace="outer"
    )
    ran: list[str] = []

    async def visit(state: dict[str, Any]) -> dict[str, Any]:
        result = await agent.run(state["city"], durable=shared)
        assert result.run_id is not None
        ran.append(result.run_id)
        return {"done": [result.output]}

    def fan_out(state: Fanned) -> list[Send]:
        return [Send("visit", {"city": city}) for city in state["cities"]]

    builder: Any = StateGraph(Fanned)
    builder.add_node("visit", visit)
    builder.add_conditional_edges(START, fan_out, ["visit"])
    builder.add_edge("visit", END)
    state = await builder.compile().ainvoke({"cities": ["oslo", "rome"]})
    assert sorted(state["done"]) == ["oslo -> charged oslo", "rome -> charged rome"]
    assert len(set(ran)) == 2  # one super-step, one node, two tasks: two runs
    for run_id in ran:
        assert run_id.startswith("fan.graph.visit.step.1.")
        key = OperationKey(run_id, "outer.graph.visit.step.1.model.request", 0)
        assert await store.get_operation(key) is not None


async def test_a_binding_derived_by_hand_is_used_as_it_is(
    store: Store, server: ChatServer, effects: Path
) -> None:
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="scout", tools=[charge])
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    base = DurableBinding(zincir.LocalRuntime(store, registry), "mine", HANDLERS)

    async def node(state: dict[str, Any]) -> dict[str, Any]:
        where = running_node()
        assert where is not None and (where.node, where.step) == ("only", 1)
        assert node_binding(base).step_namespace == "graph.only.step.1"
        result = await agent.run("fig", durable=base.for_graph_node(where.node, where.step))
        return {"a": f"{result.run_id}: {result.output}"}

    builder: Any = StateGraph(Pair)
    builder.add_node("only", node)
    builder.add_edge(START, "only")
    builder.add_edge("only", END)
    assert await builder.compile().ainvoke({}) == {"a": "mine: fig -> charged fig"}
    assert running_node() is None and node_binding(base) is base


def test_importing_zincir_imports_no_langgraph() -> None:
    code = (
        "import sys, zincir, zincir.agent; "
        "assert not [m for m in sys.modules if m.startswith('langgraph')], 'langgraph imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


async def test_a_subgraph_node_is_named_under_its_parent(
    store: Store, server: ChatServer, effects: Path
) -> None:
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="scout", tools=[charge])
    runner = Runner(store, [agent])
    ran: list[str] = []

    async def inner(state: Pair) -> Pair:
        result = await runner.run(agent, "kiwi")
        assert result.run_id is not None
        ran.append(result.run_id)
        return {"a": result.output}

    sub: Any = StateGraph(Pair)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    parent: Any = StateGraph(Pair)
    parent.add_node("outer", sub.compile())
    parent.add_edge(START, "outer")
    parent.add_edge("outer", END)
    assert await parent.compile().ainvoke({}) == {"a": "kiwi -> charged kiwi"}
    (run_id,) = ran
    assert run_id.startswith("scout.graph.outer.graph.inner.step.1."), run_id
    key = OperationKey(run_id, "graph.outer.graph.inner.step.1.model.request", 0)
    assert await store.get_operation(key) is not None
