"""One peer measured in its own virtualenv: N sequential durable steps, per-step cost in µs.

    .venv-peers/bin/python benchmarks/peers_child.py SYSTEM DB_PATH N
    SYSTEM: dbos | dbos_pg | langgraph | langgraph_graph | pydantic_ai_dbos
            | [a]sqlitesaver_{ring|messages}_{full|normal} (a: AsyncSqliteSaver)
            | [a]zincirsaver_{ring|messages}_{full|normal} (zincir's venv: ZincirSaver)
            | inmemorysaver_{ring|messages}_full (InMemorySaver)

DBOS runs on a SQLite file switched to WAL before DBOS opens it (DBOS leaves the rollback
journal otherwise), or with ``dbos_pg`` on the PostgreSQL database whose URL is DB_PATH.
LangGraph uses SqliteSaver with ``durability="sync"``, so each step's checkpoint is persisted
before the next step starts. ``langgraph_graph`` is the graph that benchmarks/run.py also runs
on zincir's ``ZincirSaver`` (``step_graph``, ``graph_steps_us`` are imported from here, so
both sides run the same code): a ring of ``GRAPH_NODES`` small nodes, one per super-step, for
N super-steps on SqliteSaver. ``pydantic_ai_dbos`` measures the durable agent turn (one model
request + three tool calls, ``FunctionModel``, trivial tools) of pydantic-ai with its
``DBOSDurability`` capability (``pydantic-ai-slim[dbos]``): N runs of ``TURNS`` turns each,
the tools DBOS steps; ``us_per_step`` is then the cost of a turn.
Prints one JSON line.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import uuid
from typing import Any, TypedDict

PAYLOAD = "x" * 100
TURNS = 5
TURN_TOOLS = ("lookup", "price", "stock")
GRAPH_NODES = 4


def step_result(i: int) -> dict[str, Any]:
    return {"i": i, "payload": PAYLOAD}


class GraphState(TypedDict):
    """LangGraph's state: the counter and the last result, so checkpoints stay O(1)."""

    i: int
    last: dict[str, Any]


def dbos_us(path: str, n: int) -> float:
    """DBOS steps on a SQLite file (``path``) or on PostgreSQL (``path`` a postgresql:// URL)."""
    if path.startswith("postgresql://"):
        database_url = "postgresql+psycopg://" + path.removeprefix("postgresql://")
    else:
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
        database_url = "sqlite:///" + path
    from dbos import DBOS, SetWorkflowID

    DBOS(
        config={
            "name": "zincir-bench",
            "system_database_url": database_url,
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def one_step(i: int) -> dict[str, Any]:
        return step_result(i)

    @DBOS.workflow()
    def steps(count: int) -> int:
        for i in range(count):
            one_step(i)
        return count

    DBOS.launch()
    fresh = uuid.uuid4().hex  # a database shared between rounds must not replay a workflow
    try:
        with SetWorkflowID(f"warm-up-{fresh}"):
            steps(20)
        with SetWorkflowID(f"measured-{fresh}"):
            started = time.perf_counter()
            steps(n)
            return (time.perf_counter() - started) / n * 1e6
    finally:
        DBOS.destroy(destroy_registry=True)


def langgraph_us(path: str, n: int) -> float:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    limit = {"n": 0}

    def step(state: GraphState) -> GraphState:
        return {"i": state["i"] + 1, "last": step_result(state["i"])}

    def more(state: GraphState) -> str:
        return "step" if state["i"] < limit["n"] else END

    builder = StateGraph(GraphState)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", more, ["step", END])
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))

    def run(thread: str, count: int) -> None:
        limit["n"] = count
        config = {"configurable": {"thread_id": thread}, "recursion_limit": count + 10}
        graph.invoke({"i": 0, "last": {}}, config, durability="sync")

    run("warm-up", 20)
    started = time.perf_counter()
    run("measured", n)
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed / n * 1e6


class RingState(TypedDict):
    """The ring graph's state: the super-step counter, where to stop, the last result."""

    i: int
    stop: int
    last: dict[str, Any]


def step_graph(checkpointer: Any) -> Any:
    """``GRAPH_NODES`` nodes n0 → n1 → … → n0, each a super-step returning ``step_result``,
    until ``i`` reaches ``stop``; compiled on ``checkpointer``."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(RingState)
    names = [f"n{k}" for k in range(GRAPH_NODES)]
    for k, name in enumerate(names):
        following = names[(k + 1) % GRAPH_NODES]

        def node(state: RingState) -> dict[str, Any]:
            return {"i": state["i"] + 1, "last": step_result(state["i"])}

        def route(state: RingState, following: str = following) -> str:
            return following if state["i"] < state["stop"] else END

        builder.add_node(name, node)
        builder.add_conditional_edges(name, route, [following, END])
    builder.add_edge(START, names[0])
    return builder.compile(checkpointer=checkpointer)


def graph_steps_us(graph: Any, n: int) -> float:
    """µs per super-step of a thread of ``n`` super-steps (``durability="sync"``: each
    persisted before the next starts), after a warm-up thread of 20."""

    def run(thread: str, count: int) -> None:
        config = {"configurable": {"thread_id": thread}, "recursion_limit": count + 10}
        result = graph.invoke({"i": 0, "stop": count, "last": {}}, config, durability="sync")
        assert result["i"] == count

    run("warm-up", 20)
    started = time.perf_counter()
    run("measured", n)
    return (time.perf_counter() - started) / n * 1e6


CHAT_STEPS = 100
CHAT_TEXT = "word " * 40


def messages_graph(checkpointer: Any) -> Any:
    """A chat agent's state: a list of messages (``add_messages``) that grows by one message
    a super-step, human and AI in turn, until it holds ``stop``; compiled on
    ``checkpointer``."""
    from typing import Annotated

    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    chat_state = TypedDict(  # type: ignore[misc]  # noqa: UP013  (LangGraph is imported late)
        "chat_state", {"messages": Annotated[list[AnyMessage], add_messages], "stop": int}
    )

    def speak(state: Any) -> dict[str, Any]:
        count = len(state["messages"])
        kind = AIMessage if count % 2 else HumanMessage
        return {"messages": [kind(content=f"{count}: {CHAT_TEXT}", id=f"m{count}")]}

    def route(state: Any) -> str:
        return "speak" if len(state["messages"]) < state["stop"] else END

    builder = StateGraph(chat_state)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_conditional_edges("speak", route, ["speak", END])
    return builder.compile(checkpointer=checkpointer)


def _threads(graph: str, n: int) -> list[tuple[str, dict[str, Any], int]]:
    """The threads a measurement runs: (thread id, input, super-steps), warm-up first. The
    ring runs one thread of ``n``; the chat, threads of ``CHAT_STEPS`` (``n`` in all)."""
    if graph == "messages":
        chat = {"messages": [], "stop": CHAT_STEPS}
        count = max(1, n // CHAT_STEPS)
        return [("warm-up", chat, CHAT_STEPS)] + [
            (f"chat-{k}", chat, CHAT_STEPS) for k in range(count)
        ]
    return [
        ("warm-up", {"i": 0, "stop": 20, "last": {}}, 20),
        ("measured", {"i": 0, "stop": n, "last": {}}, n),
    ]


def _compiled(checkpointer: Any, graph: str) -> Any:
    return messages_graph(checkpointer) if graph == "messages" else step_graph(checkpointer)


def _config(thread: str, count: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "recursion_limit": count + 10}


def graph_us(checkpointer: Any, graph: str, n: int) -> float:
    """µs per super-step of ``graph`` ("ring": ``step_graph``; "messages":
    ``messages_graph``) on ``checkpointer``, ``durability="sync"``, after a warm-up thread."""
    compiled = _compiled(checkpointer, graph)
    (warm, *measured) = _threads(graph, n)
    compiled.invoke(warm[1], _config(warm[0], warm[2]), durability="sync")
    started = time.perf_counter()
    for thread, start, count in measured:
        compiled.invoke(start, _config(thread, count), durability="sync")
    return (time.perf_counter() - started) / sum(c for _, _, c in measured) * 1e6


async def agraph_us(checkpointer: Any, graph: str, n: int) -> float:
    """:func:`graph_us` through ``ainvoke`` (an async saver)."""
    compiled = _compiled(checkpointer, graph)
    (warm, *measured) = _threads(graph, n)
    await compiled.ainvoke(warm[1], _config(warm[0], warm[2]), durability="sync")
    started = time.perf_counter()
    for thread, start, count in measured:
        await compiled.ainvoke(start, _config(thread, count), durability="sync")
    return (time.perf_counter() - started) / sum(c for _, _, c in measured) * 1e6


def stored_bytes(conn: Any, tables: dict[str, tuple[str, ...]]) -> int:
    """The bytes of the named columns over the named tables (what a saver stored)."""
    total = 0
    for table, columns in tables.items():
        sizes = " + ".join(f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in columns)
        total += conn.execute(f"SELECT coalesce(sum({sizes}), 0) FROM {table}").fetchone()[0]
    return int(total)


WRITE_COLUMNS = (
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "task_id",
    "idx",
    "channel",
    "type",
    "value",
    "task_path",
)
"""A write's columns, the same in both savers' tables."""
SQLITESAVER_COLUMNS = {
    "checkpoints": (
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "type",
        "checkpoint",
        "metadata",
    ),
    "writes": WRITE_COLUMNS,
}


def sqlitesaver_us(
    path: str, n: int, graph: str, synchronous: str, asynchronous: bool = False
) -> tuple[float, int]:
    """µs per super-step on SqliteSaver (``asynchronous``: AsyncSqliteSaver) at
    ``synchronous`` (FULL is sqlite3's default), and the bytes it stored."""
    pragma = f"PRAGMA synchronous={synchronous.upper()}"
    if asynchronous:
        import asyncio

        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async def measure() -> float:
            async with aiosqlite.connect(path) as conn:
                await conn.execute(pragma)
                return await agraph_us(AsyncSqliteSaver(conn), graph, n)

        us = asyncio.run(measure())
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute(pragma)
        try:
            us = graph_us(SqliteSaver(conn), graph, n)
        finally:
            conn.close()
    with sqlite3.connect(path) as conn:
        return us, stored_bytes(conn, SQLITESAVER_COLUMNS)


ZINCIR_SAVER_COLUMNS = {
    "langgraph_checkpoints": (
        *SQLITESAVER_COLUMNS["checkpoints"][:4],
        "run_id",
        *SQLITESAVER_COLUMNS["checkpoints"][4:],
        "created_at",
    ),
    "langgraph_writes": (*WRITE_COLUMNS, "created_at"),
}
"""The columns ZincirSaver stores (SQLITESAVER_COLUMNS: SqliteSaver's)."""


def zincirsaver_us(
    path: str, n: int, graph: str, synchronous: str, asynchronous: bool = False
) -> tuple[float, int]:
    """µs per super-step on ZincirSaver (``asynchronous``: AsyncZincirSaver) at
    ``synchronous``, and the bytes it stored; run by benchmarks/run.py with zincir's venv."""
    from zincir.integrations.langgraph import AsyncZincirSaver, ZincirSaver

    sync = "normal" if synchronous == "normal" else "full"
    if asynchronous:
        import asyncio

        async def measure() -> float:
            async with AsyncZincirSaver.from_conn_string(path, synchronous=sync) as saver:
                return await agraph_us(saver, graph, n)

        us = asyncio.run(measure())
    else:
        with ZincirSaver.from_conn_string(path, synchronous=sync) as saver:
            us = graph_us(saver, graph, n)
    with sqlite3.connect(path) as conn:
        return us, stored_bytes(conn, ZINCIR_SAVER_COLUMNS)


def langgraph_graph_us(path: str, n: int) -> float:
    return sqlitesaver_us(path, n, "ring", "full")[0]


def pydantic_ai_dbos_us(path: str, n: int) -> float:
    """Per turn: ``n`` agent runs of ``TURNS`` turns, each run a DBOS workflow."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    import asyncio
    import statistics

    from dbos import DBOS, SetWorkflowID
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSDurability
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    DBOS(
        config={
            "name": "zincir-bench-agent",
            "system_database_url": "sqlite:///" + path,
            "log_level": "WARNING",
        }
    )

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        number = sum(1 for message in messages if isinstance(message, ModelResponse))
        if number >= TURNS:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart(name, {"i": k}, tool_call_id=f"c{number}-{k}")
                for k, name in enumerate(TURN_TOOLS)
            ]
        )

    agent = Agent(FunctionModel(model), name="bench", capabilities=[DBOSDurability()])

    @agent.tool_plain
    @DBOS.step()
    async def lookup(i: int) -> dict[str, Any]:
        """Look an item up."""
        return step_result(i)

    @agent.tool_plain
    @DBOS.step()
    async def price(i: int) -> dict[str, Any]:
        """An item's price."""
        return step_result(i)

    @agent.tool_plain
    @DBOS.step()
    async def stock(i: int) -> dict[str, Any]:
        """An item's stock."""
        return step_result(i)

    @DBOS.workflow()
    async def turn_run(prompt: str) -> str:
        result = await agent.run(prompt)
        return str(result.output)

    async def measure() -> float:
        for i in range(3):
            with SetWorkflowID(f"warm-{i}"):
                assert await turn_run("Check the items.") == "done"
        samples = []
        for i in range(n):
            with SetWorkflowID(f"turn-{i}"):
                started = time.perf_counter()
                await turn_run("Check the items.")
                samples.append((time.perf_counter() - started) / TURNS * 1e6)
        return statistics.median(samples)

    DBOS.launch()
    try:
        return asyncio.run(measure())
    finally:
        DBOS.destroy(destroy_registry=True)


def saver_system(
    saver: str, graph: str, synchronous: str = "normal", asynchronous: bool = False
) -> str:
    """The SYSTEM naming a saver's run, as :func:`main` reads it: ``saver`` is zincirsaver,
    sqlitesaver or inmemorysaver (which has no ``synchronous``), ``graph`` ring or messages."""
    sync = "full" if saver == "inmemorysaver" else synchronous
    return f"{'a' if asynchronous else ''}{saver}_{graph}_{sync}"


def main() -> None:
    system, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if "saver_" in system:  # [a]{sqlite|zincir|inmemory}saver_{ring|messages}_{full|normal}
        kind, graph, synchronous = system.split("_")
        if kind == "inmemorysaver":
            from langgraph.checkpoint.memory import InMemorySaver

            us, stored = graph_us(InMemorySaver(), graph, n), 0
        elif kind.endswith("zincirsaver"):
            us, stored = zincirsaver_us(path, n, graph, synchronous, kind == "azincirsaver")
        else:
            us, stored = sqlitesaver_us(path, n, graph, synchronous, kind == "asqlitesaver")
        print(json.dumps({"system": system, "n": n, "us_per_step": us, "bytes": stored}))
        return
    measure = {
        "dbos": dbos_us,
        "dbos_pg": dbos_us,
        "langgraph": langgraph_us,
        "langgraph_graph": langgraph_graph_us,
        "pydantic_ai_dbos": pydantic_ai_dbos_us,
    }[system]
    print(json.dumps({"system": system, "n": n, "us_per_step": measure(path, n)}))


if __name__ == "__main__":
    main()
