"""The kill sweep's workload: one job is a workflow run, an agent run and a LangGraph thread.

A job's workflow runs three steps (the second claimed ahead with the first's result), a
durable sleep, an operation on a ``LocalRuntime`` and a verified checkpoint; its agent makes
one model request asking for two tool calls, then answers; its graph (on
``AsyncZincirSaver``) runs three nodes in a row. Every side effect
goes through an external idempotent :class:`Ledger` (its own SQLite file), keyed by the
identity zincir replays: the step name, the operation's stable key, the tool arguments the
stored model response holds, the graph node. What the caller was told is done goes to the
ack file, stamped with ``CLOCK_MONOTONIC`` like every ledger call, so the sweep can tell a
body re-run after its acknowledgement from the at-least-once re-run zincir promises when a
crash lands between a body and its record.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import time
import uuid
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import apsw
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

import zincir
from zincir import Invocation, OperationKind, Verification, WorkflowContext
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.contract.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy
from zincir.integrations.langgraph import AsyncZincirSaver
from zincir.store import Store

__all__ = ["LEASE", "NODES", "Acks", "Ledger", "graph_values", "run_job"]

LEASE = timedelta(milliseconds=450)
STEPS = ("s0", "s1", "s2")
CHARGES = (0, 1)
NODES = ("n0", "n1", "n2")
_POLL = 0.02


class Ledger:
    """An external service that applies each key's effect once and answers it again after."""

    def __init__(self, path: str) -> None:
        self._conn = apsw.Connection(path)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL, at INTEGER NOT NULL, "
            "pid INTEGER NOT NULL)"
        )

    def apply(self, key: str) -> str:
        """Apply ``key``'s effect (a new value) unless applied before; its value either way."""
        with self._conn:
            self._conn.execute(
                "INSERT INTO calls (key, at, pid) VALUES (?, ?, ?)",
                (key, time.monotonic_ns(), os.getpid()),
            )
            self._conn.execute(
                "INSERT OR IGNORE INTO effects (key, value) VALUES (?, ?)", (key, uuid.uuid4().hex)
            )
            (value,) = self._conn.execute(
                "SELECT value FROM effects WHERE key = ?", (key,)
            ).fetchone()
        return str(value)

    def close(self) -> None:
        self._conn.close()


class Acks:
    """What callers were told is done: one JSON line per acknowledgement, appended."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, run_id: str, key: str, value: Any) -> None:
        line = json.dumps(
            {"kind": kind, "run": run_id, "key": key, "value": value, "at": time.monotonic_ns()}
        )
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def _registry(ledger: Ledger) -> HandlerRegistry:
    registry = HandlerRegistry()

    def apply(invocation: Invocation, request: dict[str, Any]) -> dict[str, Any]:
        return {"value": ledger.apply(invocation.stable_key())}

    registry.register(OperationKind.TOOL_CALL, "ledger", apply)
    return registry


def _agent(ledger: Ledger, run_id: str) -> Agent:
    @tool
    async def charge(key: str) -> dict[str, Any]:
        """Charge once per key."""
        return {"value": ledger.apply(key)}

    def model(request: ModelRequest) -> ModelResponse:
        if any(message.role == "assistant" for message in request.messages):
            return ModelResponse(parts=[TextPart(text="charged")])
        return ModelResponse(
            parts=[
                ToolCallPart(
                    tool_call_id=f"c{n}", tool_name="charge", arguments={"key": f"{run_id}/c{n}"}
                )
                for n in CHARGES
            ]
        )

    return Agent(FunctionModel(model), name="sweep", tools=[charge])


async def _step(wf: WorkflowContext, name: str, ledger: Ledger, following: str | None) -> Any:
    """Step ``name`` (claiming ``following`` ahead with its result, if given); a claim left by
    the killed process is released first (it is dead)."""
    key = f"{wf.run_id}/{name}"
    try:
        return await wf.step(name, lambda: ledger.apply(key), next=following)
    except zincir.StepInProgress:
        await wf.recover()
        return await wf.step(name, lambda: ledger.apply(key), next=following)


async def _workflow(wf: WorkflowContext, runtime: LocalRuntime, ledger: Ledger, acks: Acks) -> None:
    run_id = wf.run_id
    for index, name in enumerate(STEPS):
        following = STEPS[1] if index == 0 else None  # s1 is claimed ahead, s2 on its own
        acks.write("step", run_id, name, await _step(wf, name, ledger, following))
    await wf.sleep("nap", 0.2)  # long enough for the heartbeat to renew the lease
    invocation = Invocation(
        run_id=run_id,
        step_id="ledger.op",
        sequence=0,
        kind=OperationKind.TOOL_CALL,
        handler_id="ledger",
        input_json='{"op":1}',
    )
    record = await runtime.execute(invocation)
    acks.write("operation", run_id, invocation.stable_key(), zincir.encode_record(record))

    def verify(candidate: zincir.CheckpointCandidate) -> Verification:
        return Verification(passed=True, evidence={"steps": len(candidate.completed)})

    outcome = await wf.agent.checkpoint({"completed": [*STEPS, "op"], "remaining": []}, verify)
    acks.write("checkpoint", run_id, str(outcome.checkpoint_id), outcome.accepted)
    await wf.complete({"steps": list(STEPS)})
    acks.write("complete", run_id, "", None)


async def _run_workflow(
    store: Store, runtime: LocalRuntime, ledger: Ledger, acks: Acks, run_id: str
) -> None:
    """Create the run, or resume it through a ResumeWorker once the dead owner's lease ends."""
    run = await store.get_run(run_id)
    if run is None:
        wf = await WorkflowContext.open(store, run_id, lease_ttl=LEASE)
        try:
            await _workflow(wf, runtime, ledger, acks)
        finally:
            await wf.close()
        return

    async def handler(ctx: zincir.AgentContext) -> None:
        if ctx.run_id != run_id:
            return  # another job's run: not ours to resume here
        await _workflow(WorkflowContext.from_agent(ctx), runtime, ledger, acks)

    worker = (
        zincir.ResumeWorker(store, lease_ttl=LEASE)
        .poll_interval(timedelta(seconds=_POLL))
        .backoff(0, factor=1, maximum=0)
    )
    while (run := await store.get_run(run_id)) is not None and run["status"] not in (
        "completed",
        "failed",
        "cancelled",
    ):
        if not await worker.run_once(handler):
            await asyncio.sleep(_POLL)


class GraphState(TypedDict):
    values: Annotated[list[str], operator.add]


def _graph(ledger: Ledger, thread: str, saver: AsyncZincirSaver) -> CompiledStateGraph[Any]:
    """Three nodes in a row, each applying its ledger effect once per key."""
    builder = StateGraph(GraphState)
    for name in NODES:

        def node(state: GraphState, name: str = name) -> dict[str, list[str]]:
            return {"values": [ledger.apply(f"{thread}/{name}")]}

        builder.add_node(name, node)
    builder.add_edge(START, NODES[0])
    for before, after in zip(NODES, NODES[1:], strict=False):
        builder.add_edge(before, after)
    builder.add_edge(NODES[-1], END)
    return builder.compile(checkpointer=saver)


async def _run_graph(store: Store, ledger: Ledger, acks: Acks, thread: str) -> None:
    """Start the graph, or resume it from its latest checkpoint (a finished one returns)."""
    saver = AsyncZincirSaver(store)
    config: Any = {"configurable": {"thread_id": thread}}
    started = await saver.aget_tuple(config) is not None
    result = await _graph(ledger, thread, saver).ainvoke(
        None if started else {"values": []}, config
    )
    acks.write("graph", thread, "", result["values"])


async def graph_values(db: str, thread: str) -> list[str] | None:
    """The values of the graph's latest checkpoint, read back through the saver."""
    store = zincir.open_store(db)
    try:
        saver = AsyncZincirSaver(store)
        snapshot = await _graph(Ledger(":memory:"), thread, saver).aget_state(
            {"configurable": {"thread_id": thread}}
        )
        values = snapshot.values.get("values") if snapshot.values else None
        return None if snapshot.next else values
    finally:
        await store.close()


async def run_job(db: str, ledger_path: str, ack_path: str, job: str) -> None:
    """Run (or resume) job ``job`` to completion on the store at ``db``."""
    store = zincir.open_store(db)
    ledger = Ledger(ledger_path)
    acks = Acks(ack_path)
    try:
        registry = _registry(ledger)
        runtime = LocalRuntime(store, registry, retry=RetryPolicy(max_attempts=1))
        await _run_workflow(store, runtime, ledger, acks, f"wf-{job}")
        agent_id = f"ag-{job}"
        agent = _agent(ledger, agent_id)
        handlers = Handlers(model_request="sweep-model", tool_call="sweep-tools")
        serve(registry, agent, handlers)
        binding = DurableBinding(runtime, agent_id, handlers, lease_ttl=LEASE)
        while True:
            try:
                result = await agent.run("Charge both.", durable=binding)
                break
            except zincir.LeaseHeld:
                await asyncio.sleep(_POLL)
        acks.write("agent", agent_id, "", result.output)
        await _run_graph(store, ledger, acks, f"lg-{job}")
    finally:
        acks.close()
        ledger.close()
        await store.close()
