"""Encryption at rest, end to end: one canary string put in every kind of payload a user
stores (a durable agent's prompt, tool argument, tool result, edited approval, answer and
streamed items; a workflow's config, step result, checkpoint, message, result and error; a
restart checkpoint; a LangGraph graph's state) appears nowhere in the database, read raw, and
every API gives it back decrypted.

The same scenario on a plain store is the control: there the canary shows in each of those
columns, so a column that stops leaking under encryption is one the test really looks at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.openai_server import ChatServer, Reply, chunk, completion, tool_call, usage
from tests.helpers import is_postgres
from zincir.agent import Agent, Approve, OpenAIChatModel, Runner, decide, pending_approvals, tool
from zincir.restart import RestartCheckpoint, SQLRestartStore
from zincir.store import Store
from zincir.store._sealing import SEALED_COLUMNS
from zincir.streams import read
from zincir.workflow import WorkflowContext, send_message

CANARY = "CANARY-7f3a-\u00e9"
"""Its ``é`` is escaped in JSON written with ``ensure_ascii``: both forms are looked for."""
AGENT_RUN = "canary-agent"
WORKFLOW_RUN = "canary-workflow"
RECEIVER_RUN = "canary-receiver"
FINISHED_RUN = "canary-finished"
FAILED_RUN = "canary-failed"
STREAM_RUN = "canary-stream"
THREAD = "canary-thread"


def forms(canary: str = CANARY) -> list[bytes]:
    """The byte sequences that would betray the canary in a raw file: its UTF-8, its JSON
    escapes (as JSON text, and that text escaped again inside a JSON string), UTF-16."""
    escaped = json.dumps(canary)[1:-1]
    twice = json.dumps(escaped)[1:-1]
    found = {canary.encode(), escaped.encode(), twice.encode()}
    found |= {canary.encode("utf-16-le"), canary.encode("utf-16-be")}
    return sorted(found)


def betrays(value: Any) -> bool:
    """Whether a stored value, as the driver returns it, shows the canary."""
    if value is None:
        return False
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        hexed = value.lower()  # PostgreSQL's text of a bytea: \x and hex digits
        if any(form.hex() in hexed for form in forms()):
            return True
    elif isinstance(value, bytes):
        data = value
    else:
        data = str(value).encode()
    return any(form in data for form in forms())


# -- the scenario -----------------------------------------------------------------------------


@tool
async def lookup(query: str) -> dict[str, str]:
    """Look something up (the result repeats what was asked)."""
    return {"query": query, "found": f"record of {query}"}


@tool(requires_approval=True)
async def refund(order_id: str) -> str:
    """Refund an order (a person approves it first)."""
    return f"refunded {order_id}"


def script(server: ChatServer) -> None:
    """The model: look the canary up, ask to refund an order, then answer with the canary."""
    server.script(
        Reply(
            completion(
                None,
                [tool_call("call-lookup", "lookup", json.dumps({"query": CANARY}))],
                finish_reason="tool_calls",
            )
        ),
        Reply(
            completion(
                None,
                [tool_call("call-refund", "refund", json.dumps({"order_id": "A-17"}))],
                finish_reason="tool_calls",
            )
        ),
        Reply(completion(f"all done for {CANARY}")),
    )


def stream_script(server: ChatServer) -> None:
    """A streamed answer holding the canary, split across two deltas."""
    half = len(CANARY) // 2
    server.script(
        Reply(
            chunks=[
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": f"streamed {CANARY[:half]}"}),
                chunk({"content": f"{CANARY[half:]} and {CANARY}"}),
                chunk(finish_reason="stop"),
                chunk(usage_=usage(3, 4)),
            ]
        )
    )


async def accept(candidate: zincir.CheckpointCandidate) -> zincir.Verification:
    return zincir.Verification(True, {"checked": CANARY})


def graph_with_the_canary(store: Store) -> Any:
    """A one-node LangGraph graph on ``store`` whose state and writes hold the canary."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from zincir.integrations.langgraph import AsyncZincirSaver

    class State(TypedDict):
        note: str

    def node(state: State) -> State:
        return {"note": f"{state['note']} then {CANARY}"}

    builder = StateGraph(State)
    builder.add_node("note", node)
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    return builder.compile(checkpointer=AsyncZincirSaver(store))


@dataclass
class Seen:
    """What the APIs gave back, per payload."""

    values: dict[str, Any] = field(default_factory=dict)


async def put_the_canary_everywhere(store: Store, server: ChatServer) -> Seen:
    """Run the scenario on ``store``; what each API returned on the way."""
    seen = Seen()
    script(server)
    agent = Agent(
        OpenAIChatModel("gpt-test", server.client()),
        name="canary-agent",
        instructions="Help.",
        tools=[lookup, refund],
    )
    runner = Runner(store, [agent])
    paused = await runner.run(agent, f"Please look up {CANARY}", run_id=AGENT_RUN)
    assert paused.paused is not None, paused.output
    [waiting] = await pending_approvals(store, AGENT_RUN)
    decided = await decide(
        store, waiting.approval_id, Approve(arguments={"order_id": CANARY}, decided_by="alice")
    )
    seen.values["decided approval"] = decided.decision
    done = await runner.resume(AGENT_RUN)
    seen.values["agent output"] = done.output

    stream_script(server)
    streamed = runner.run_stream(agent, f"Stream about {CANARY}", run_id=STREAM_RUN)
    async for _ in streamed:
        pass
    seen.values["streamed output"] = streamed.result.output

    await (await WorkflowContext.open(store, RECEIVER_RUN)).close()
    async with await WorkflowContext.open(
        store, WORKFLOW_RUN, config={"secret": CANARY}
    ) as workflow:  # left running: a reopened context replays its step
        seen.values["step result"] = await workflow.step("canary-step", lambda: {"v": CANARY})
        outcome = await workflow.agent.checkpoint(
            {"completed": [CANARY], "remaining": ["the rest"]}, accept
        )
        seen.values["checkpoint accepted"] = outcome.accepted
    await send_message(store, RECEIVER_RUN, "canary-topic", {"m": CANARY})
    async with await WorkflowContext.open(store, RECEIVER_RUN) as receiver:
        seen.values["received message"] = await receiver.recv("canary-topic", timeout=5)
    async with await WorkflowContext.open(store, FINISHED_RUN) as finished:
        await finished.complete({"result": CANARY})
    async with await WorkflowContext.open(store, FAILED_RUN) as failed:
        await failed.fail(f"broke on {CANARY}")

    graph = graph_with_the_canary(store)
    thread = {"configurable": {"thread_id": THREAD}}
    seen.values["graph output"] = await graph.ainvoke({"note": CANARY}, thread)

    checkpoints = SQLRestartStore(store)
    seen.values["saved checkpoint"] = await checkpoints.save(
        WORKFLOW_RUN, "consumer", 1, {"cursor": CANARY}
    )
    return seen


def not_run_again() -> None:
    raise AssertionError("a replayed step ran again")


async def read_back(store: Store, server: ChatServer) -> dict[str, Any]:
    """Every payload as the APIs give it back from ``store`` (after a reopen)."""
    back: dict[str, Any] = {}
    for run_id in (AGENT_RUN, STREAM_RUN, WORKFLOW_RUN, RECEIVER_RUN, FINISHED_RUN, FAILED_RUN):
        events = await store.list_events(run_id)
        back[f"events of {run_id}"] = [event.payload for event in events]
        run = await store.get_run(run_id)
        assert run is not None
        back[f"config of {run_id}"] = json.loads(run["config"])
        back[f"result of {run_id}"] = None if run["result"] is None else json.loads(run["result"])
        back[f"error of {run_id}"] = run["last_error"]
    agent = Agent(
        OpenAIChatModel("gpt-test", server.client()), name="canary-agent", tools=[lookup, refund]
    )
    back["agent result"] = (await Runner(store, [agent]).resume(AGENT_RUN)).output
    [approval] = await store.list_approvals(AGENT_RUN, pending=False)
    assert approval.decision_json is not None
    back["approval decision"] = json.loads(approval.decision_json)
    back["approval arguments"] = json.loads(approval.arguments_json)
    async with await WorkflowContext.open(store, WORKFLOW_RUN) as workflow:
        back["replayed step"] = await workflow.step("canary-step", not_run_again)
        state = await workflow.agent.state()
        assert state.checkpoint is not None
        back["checkpoint"] = (list(state.checkpoint.completed), state.checkpoint.evidence)
    async with await WorkflowContext.open(store, RECEIVER_RUN) as receiver:
        back["replayed message"] = await receiver.recv("canary-topic", timeout=0)
    loaded = await SQLRestartStore(store).load(WORKFLOW_RUN, "consumer")
    back["restart checkpoint"] = loaded
    back["stream"] = [item.payload async for item in read(store, STREAM_RUN)]
    graph = graph_with_the_canary(store)
    snapshot = await graph.aget_state({"configurable": {"thread_id": THREAD}})
    back["graph state"] = snapshot.values
    return back


# -- reading the database raw -----------------------------------------------------------------


def sqlite_leaks(path: Path) -> list[str]:
    """``table.column`` of each SQLite column holding the canary in some row."""
    import apsw

    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    conn.set_busy_timeout(10_000)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        leaks = []
        for table in tables:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info('{table}')")]
            for column in columns:
                for (value,) in conn.execute(f'SELECT "{column}" FROM "{table}"'):
                    if betrays(value):
                        leaks.append(f"{table}.{column}")
                        break
        return leaks
    finally:
        conn.close()


def postgres_leaks(url: str) -> list[str]:
    """``table.column`` of each PostgreSQL column whose text holds the canary in some row
    (every table of the store's schema, each row as text: ``SELECT t::text FROM table t``
    finds a leak, then each column names it)."""
    import psycopg
    from psycopg import sql as pgsql

    from zincir.store.postgres._base import split_schema

    conninfo, schema, _ = split_schema(url)
    leaks = []
    with psycopg.connect(conninfo) as conn:
        conn.read_only = True
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "AND table_type = 'BASE TABLE' ORDER BY table_name",
                (schema,),
            )
        ]
        assert "events" in tables, tables
        for table in tables:
            name = pgsql.Identifier(schema, table)
            rows = conn.execute(pgsql.SQL("SELECT t::text FROM {} t").format(name)).fetchall()
            if not any(betrays(text) for (text,) in rows):
                continue
            columns = [
                column
                for (column,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s ORDER BY ordinal_position",
                    (schema, table),
                )
            ]
            for column in columns:
                query = pgsql.SQL("SELECT {}::text FROM {}").format(pgsql.Identifier(column), name)
                if any(betrays(text) for (text,) in conn.execute(query)):
                    leaks.append(f"{table}.{column}")
    return leaks


def leaks_of(target: str) -> list[str]:
    return postgres_leaks(target) if is_postgres(target) else sqlite_leaks(Path(target))


def raw_file_leaks(path: Path) -> list[str]:
    """The SQLite files (the database, its WAL) whose bytes hold the canary."""
    return [
        file.name
        for file in (path, path.with_name(path.name + "-wal"))
        if file.exists() and any(form in file.read_bytes() for form in forms())
    ]


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture
def keys() -> zincir.Encryption:
    return zincir.Encryption({"canary-key": zincir.Encryption.generate_key()}, "canary-key")


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ZINCIR_ENCRYPTION_KEYS", raising=False)
    yield


def canary_in(value: Any) -> bool:
    return CANARY in json.dumps(value, ensure_ascii=False, default=repr)


def assert_the_apis_give_it_back(seen: Seen, back: dict[str, Any]) -> None:
    """Every payload comes back from the APIs as it was put in, decrypted."""
    decision = seen.values["decided approval"]
    assert decision is not None and decision.override_arguments == {"order_id": CANARY}
    assert CANARY in seen.values["agent output"]
    assert seen.values["step result"] == {"v": CANARY}
    assert seen.values["received message"] == {"m": CANARY}
    assert seen.values["saved checkpoint"] == RestartCheckpoint(
        WORKFLOW_RUN, "consumer", 1, {"cursor": CANARY}
    )
    assert back["agent result"] == seen.values["agent output"]
    assert back[f"config of {AGENT_RUN}"]["prompt"] == f"Please look up {CANARY}"
    assert canary_in(back[f"result of {AGENT_RUN}"])
    assert back[f"config of {WORKFLOW_RUN}"] == {"secret": CANARY}
    assert back[f"result of {FINISHED_RUN}"] == {"result": CANARY}
    assert back["approval decision"]["override_arguments"] == {"order_id": CANARY}
    assert back["approval arguments"] == {"order_id": "A-17"}
    assert canary_in(back[f"events of {WORKFLOW_RUN}"])  # the step's result
    assert canary_in(back[f"events of {AGENT_RUN}"])
    assert back["replayed step"] == {"v": CANARY}
    assert back["replayed message"] == {"m": CANARY}
    assert seen.values["checkpoint accepted"]
    assert back["checkpoint"] == ([CANARY], {"checked": CANARY})
    assert back[f"error of {FAILED_RUN}"] == f"broke on {CANARY}"
    assert seen.values["streamed output"] == f"streamed {CANARY} and {CANARY}"
    assert canary_in(back["stream"])
    assert back[f"config of {STREAM_RUN}"]["prompt"] == f"Stream about {CANARY}"
    assert seen.values["graph output"] == {"note": f"{CANARY} then {CANARY}"}
    assert back["graph state"] == seen.values["graph output"]
    assert back["restart checkpoint"] == seen.values["saved checkpoint"]


async def test_a_plain_store_shows_the_canary_in_each_payload_column(
    store_target: str, server: ChatServer
) -> None:
    """The control: without encryption the same scenario leaves the canary readable in
    every family's payload columns (so the encrypted test below looks where it leaks)."""
    store = zincir.open_store(store_target)
    try:
        seen = await put_the_canary_everywhere(store, server)
    finally:
        await store.close()
    leaks = set(leaks_of(store_target))
    assert {
        "agent_runs.config",
        "agent_runs.result",
        "events.payload",
        "messages.payload",
        "approvals.decision",
        "content.body",
        "operations.input_json",
        "operations.record",
        "restart_checkpoints.payload",
        "agent_runs.last_error",
        "checkpoints.state",
        "checkpoints.evidence",
        "stream_items.payload",
        "langgraph_checkpoints.checkpoint",
        "langgraph_writes.value",
    } <= leaks, sorted(leaks)
    sealed = {
        f"{table}.{column}" for table, columns in SEALED_COLUMNS.items() for column in columns
    }
    assert leaks <= sealed, f"payload columns not in SEALED_COLUMNS: {sorted(leaks - sealed)}"
    if not is_postgres(store_target):
        assert raw_file_leaks(Path(store_target)) == ["zincir.db"]
    reopened = zincir.open_store(store_target)
    try:
        assert_the_apis_give_it_back(seen, await read_back(reopened, server))
    finally:
        await reopened.close()


async def test_an_encrypted_store_keeps_the_canary_out_of_every_byte_and_gives_it_back(
    store_target: str, server: ChatServer, keys: zincir.Encryption
) -> None:
    store = zincir.open_store(store_target, encryption=keys)
    try:
        seen = await put_the_canary_everywhere(store, server)
        leaks = leaks_of(store_target)
        if not is_postgres(store_target):
            files = raw_file_leaks(Path(store_target))  # the WAL not yet checkpointed
            assert Path(store_target + "-wal").exists()
    finally:
        await store.close()
    assert leaks == [], f"the canary is readable in {leaks}"
    if not is_postgres(store_target):
        assert files == [], f"the canary is readable in the raw {files}"
        assert raw_file_leaks(Path(store_target)) == []  # closed: the WAL checkpointed
    reopened = zincir.open_store(store_target, encryption=keys)
    try:
        assert_the_apis_give_it_back(seen, await read_back(reopened, server))
    finally:
        await reopened.close()
    assert leaks_of(store_target) == []
    if not is_postgres(store_target):
        assert raw_file_leaks(Path(store_target)) == []
