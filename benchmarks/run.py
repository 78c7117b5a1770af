"""zincir's benchmark suite: every figure beside its baseline, measured in the same run.

    python benchmarks/run.py [--quick] [--json PATH] [--peers] [--agent-peer] [--temporal]
                             [--no-postgres]

The raw APSW loop (one INSERT + COMMIT per step into a WAL database) is the physical limit
each durable step is compared with. Beside it, benchmarks/floor_bench.py times the bare SQL
of a step on zincir's schema and on a leaner prototype schema, and counts the WAL frames
each step figure writes. Every figure is taken after a warm-up. Peers (DBOS, LangGraph) run
in their own virtualenv (``make bench-peers``) as child processes, on the same number of
sequential steps.

The durable agent turn (one model request + three tool calls, ``FunctionModel``, trivial
tools) is measured on ``LocalRuntime`` (FULL) and without ``durable=``; its overhead is
compared with ``raw_full_us``, and so is ``agent_turn_sql_us``, the statements the durable
turn ran on its write connection issued again from a bare APSW loop on a copy of the
database (floor_bench.py): what the turn's SQL costs with no zincir code. With ``--peers``
or ``--agent-peer`` the same turn runs on pydantic-ai with its DBOS durability in the peers
venv (skipped, with a note, when ``pydantic-ai-slim[dbos]`` is not installed there).

Retention (benchmarks/prune_bench.py): the database size of one 1,000-turn run, a live
run's write latency alone and while ``prune_runs`` deletes old runs beside it, and resuming a
1M-event run before and after ``compact_run``.

PostgreSQL (benchmarks/postgres_bench.py, a throwaway server; ``--no-postgres`` skips it): a
step with ``synchronous_commit`` on and off against a raw INSERT + COMMIT on the same server,
four processes beside four on SQLite, and with ``--peers`` DBOS on the same server.

Durable streams (benchmarks/stream_bench.py): a streamed agent turn of 200 deltas with and
without the run's durable stream, alternating, and the bytes the stream adds per 1,000
deltas.

Encryption at rest (benchmarks/encryption_bench.py): a step (FULL and NORMAL) and the durable
agent turn on a plain store and on one sealing its payloads (``encryption=``), alternately.

Queues (benchmarks/queue_bench.py): enqueue-to-start latency and throughput of 4 serving
processes taking runs from a ``Queue``, against 4 plain ``ResumeWorker`` processes, rounds
alternating; on SQLite and (unless ``--no-postgres``) on PostgreSQL.

OpenAI Agents SDK (benchmarks/openai_agents_bench.py): a turn of ``DurableRunner`` (one model
request asking for one tool call, and the call, through the real SDK and ``openai`` client
against the scripted server) against the same turn of ``agents.Runner`` without durability,
runs alternating.

Long runs (benchmarks/long_run.py): one durable agent run of ``--long-run-turns`` turns
(1,000; 100 with ``--quick``), each adding about 2 KB: its database bytes at turns 50, 150,
300 and 1,000, bytes per turn early and late, turn time early and late, a new process's
resume to the next model request, and the same conversation on LangGraph's ``SqliteSaver``
in the peers venv (when it exists); a full run rewrites
docs/operations/performance/long-run.md and its plot.

With ``--peers`` one LangGraph graph (``peers_child.step_graph``: a ring of small nodes, one
super-step each, ``durability="sync"``) runs on ``ZincirSaver`` here and on LangGraph's
``SqliteSaver`` in the peers venv, alternately; on ``InMemorySaver`` too, the ceiling any
saver can reach (LangGraph's own cost per checkpointed super-step). Skipped, with a note,
when LangGraph is not importable in this venv.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))  # the sibling modules (floor_bench, prune_bench, ...)

import floor_bench  # noqa: E402
import long_run  # noqa: E402

import zincir  # noqa: E402
from zincir import AgentContext, CheckpointCandidate, ToolCall, Verification  # noqa: E402
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool  # noqa: E402
from zincir.contract import Invocation, OperationKind  # noqa: E402
from zincir.contract.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy  # noqa: E402
from zincir.store import Store  # noqa: E402
from zincir.workflow import WorkflowContext  # noqa: E402

PAYLOAD = "x" * 100
StepRunner = Callable[[int], Awaitable[None]]


def step_result(i: int) -> dict[str, Any]:
    """What every benchmarked step returns (the same as the peers script)."""
    return {"i": i, "payload": PAYLOAD}


class Bench:
    """Holds the temporary folder, the sizes and the collected figures."""

    def __init__(self, quick: bool, repeat: int) -> None:
        self.quick = quick
        self.repeat = repeat
        self.folder = Path(tempfile.mkdtemp(prefix="zincir-bench-"))
        self.figures: dict[str, float] = {}
        self.notes: dict[str, str] = {}
        self._count = 0

    def db(self, label: str) -> str:
        self._count += 1
        return str(self.folder / f"{self._count:03d}-{label}.db")

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def median_of(samples: list[float]) -> float:
    return statistics.median(samples)


# -- the physical limit --------------------------------------------------------------------


def raw_step_us(path: str, synchronous: str, n: int) -> float:
    """APSW: per step json.dumps + BEGIN IMMEDIATE + INSERT + COMMIT into a WAL database."""
    return floor_bench.raw_step_us(path, synchronous, n, step_result)


# -- zincir scenarios ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def warm_workflow(
    path: str,
    synchronous: str,
    warm_up: int,
    run_id: str,
    *,
    single_process: bool = False,
    ahead: bool = False,
    encryption: zincir.Encryption | None = None,
) -> AsyncIterator[StepRunner]:
    """Run ``run_id``'s ``step(i)`` on a store at ``path``, after ``warm_up`` steps;
    ``ahead``: each step claims the next with its result (``next=``); ``encryption``: on a
    store sealing its payloads with those keys."""
    store = zincir.open_store(
        path,
        synchronous=synchronous,  # type: ignore[arg-type]
        single_process=single_process,
        encryption=encryption,
    )
    try:
        async with await WorkflowContext.open(store, run_id) as wf:
            for i in range(warm_up):
                following = (f"warm-{i + 1}" if i + 1 < warm_up else "step-0") if ahead else None
                await wf.step(f"warm-{i}", lambda i=i: step_result(i), next=following)

            async def step(i: int) -> None:
                following = f"step-{i + 1}" if ahead else None
                await wf.step(f"step-{i}", lambda: step_result(i), next=following)

            yield step
    finally:
        await store.close()


async def step_us(
    path: str,
    synchronous: str,
    n: int,
    *,
    single_process: bool = False,
    ahead: bool = False,
    encryption: zincir.Encryption | None = None,
) -> float:
    """WorkflowContext.step, sequentially, one run (``ahead``: each claiming the next)."""
    run_id = f"steps-{synchronous}"
    async with warm_workflow(
        path,
        synchronous,
        50,
        run_id,
        single_process=single_process,
        ahead=ahead,
        encryption=encryption,
    ) as step:
        started = time.perf_counter()
        for i in range(n):
            await step(i)
        return (time.perf_counter() - started) / n * 1e6


async def step_frames(path: str, *, ahead: bool = False) -> float:
    """WAL frames per WorkflowContext.step (FULL; NORMAL writes the same pages)."""
    async with warm_workflow(path, "full", 20, "frames", ahead=ahead) as step:
        frames = floor_bench.WalFrames(path)
        frames.reset()
        for i in range(floor_bench.FRAME_STEPS):
            await step(i)
        return frames.count() / floor_bench.FRAME_STEPS


async def agent_cycle_us(path: str, n: int) -> float:
    """record_response with one tool call, then record_tool_result (FULL)."""
    store = zincir.open_store(path)
    try:
        ctx = await AgentContext.create(store, name="cycle")
        started = time.perf_counter()
        for i in range(n):
            call = ToolCall(f"call-{i}", "lookup", {"i": i})
            await ctx.record_response("calling lookup", [call], "tool_use")
            await ctx.record_tool_result(call.id, step_result(i))
        elapsed = time.perf_counter() - started
        await ctx.close()
        return elapsed / n * 1e6
    finally:
        await store.close()


async def runtime_us(path: str, n: int) -> tuple[float, float]:
    """LocalRuntime.execute of n new identities, then of the same n stored ones."""
    registry = HandlerRegistry()

    @registry.handler(OperationKind.TOOL_CALL, "bench")
    async def handle(invocation: Invocation, request: Any) -> Any:
        return step_result(invocation.sequence)

    store = zincir.open_store(path)
    try:
        runtime = LocalRuntime(store, registry, retry=RetryPolicy(max_attempts=1))
        invocations = [
            Invocation(
                "bench-run", "tool.call", i, OperationKind.TOOL_CALL, "bench", json.dumps({"i": i})
            )
            for i in range(n)
        ]
        started = time.perf_counter()
        for invocation in invocations:
            await runtime.execute(invocation)
        execute = (time.perf_counter() - started) / n * 1e6
        started = time.perf_counter()
        for invocation in invocations:
            await runtime.execute(invocation)
        replay = (time.perf_counter() - started) / n * 1e6
        return execute, replay
    finally:
        await store.close()


# -- the durable agent loop ---------------------------------------------------------------

TURN_TOOLS = ("lookup", "price", "stock")
TURN_HANDLERS = Handlers(model_request="bench-model", tool_call="bench-tools")


def turn_agent(turns: int) -> Agent:
    """``turns`` turns of one model request asking for three tool calls, then a text answer.

    The model is a ``FunctionModel`` and the tools return ``step_result``: the figure is the
    loop's own cost (direct) and what durability adds to it (durable).
    """

    @tool
    async def lookup(i: int) -> dict[str, Any]:
        """Look an item up."""
        return step_result(i)

    @tool
    async def price(i: int) -> dict[str, Any]:
        """An item's price."""
        return step_result(i)

    @tool
    async def stock(i: int) -> dict[str, Any]:
        """An item's stock."""
        return step_result(i)

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        if number >= turns:
            return ModelResponse(parts=[TextPart(text="done")])
        return ModelResponse(
            parts=[
                ToolCallPart(tool_call_id=f"c{number}-{k}", tool_name=name, arguments={"i": k})
                for k, name in enumerate(TURN_TOOLS)
            ]
        )

    return Agent(FunctionModel(model), name="bench", tools=[lookup, price, stock])


def durable_turn_agent(
    path: str, turns: int, encryption: zincir.Encryption | None = None
) -> tuple[Agent, Store, LocalRuntime]:
    """The turn agent, its handlers served on a LocalRuntime over a FULL store at ``path``
    (sealing its payloads with ``encryption``'s keys, if given)."""
    agent = turn_agent(turns)
    registry = HandlerRegistry()
    serve(registry, agent, TURN_HANDLERS)
    store = zincir.open_store(path, synchronous="full", encryption=encryption)
    return agent, store, LocalRuntime(store, registry, retry=RetryPolicy(max_attempts=1))


async def agent_turn_us(path: str, runs: int, turns: int) -> tuple[float, float]:
    """Per turn: the agent without ``durable=``, then on a LocalRuntime (FULL), ``runs`` runs
    of ``turns`` turns each (the final text request and the run's row are amortised)."""
    agent, store, runtime = durable_turn_agent(path, turns)
    try:

        async def direct(_: int) -> None:
            await agent.run("Check the items.")

        async def durable(i: int) -> None:
            binding = DurableBinding(runtime, f"turn-{i}", TURN_HANDLERS)
            result = await agent.run("Check the items.", durable=binding)
            assert result.output == "done"

        figures = []
        for index, one in enumerate((direct, durable)):
            for i in range(3):  # warm-up
                await one(-1 - i - 10 * index)
            samples = []
            for i in range(runs):
                started = time.perf_counter()
                await one(i)
                samples.append((time.perf_counter() - started) / turns * 1e6)
            figures.append(median_of(samples))
        return figures[0], figures[1]
    finally:
        await store.close()


async def agent_turn_sql_us(path: str, runs: int, turns: int) -> float:
    """Per turn, the durable turn's own statements alone (FULL): what its write connection
    ran during ``runs`` runs of ``turns`` turns, issued again from a bare APSW loop on a copy
    of the database taken before those runs (reads on reader connections not included)."""
    agent, store, runtime = durable_turn_agent(path, turns)
    for i in range(3):  # warm-up; also leaves the schema and a few runs in place
        await agent.run(
            "Check the items.", durable=DurableBinding(runtime, f"w-{i}", TURN_HANDLERS)
        )
    await store.close()
    copy = path + ".before"
    for suffix in ("", "-wal"):
        if os.path.exists(path + suffix):
            shutil.copyfile(path + suffix, copy + suffix)
    agent, store, runtime = durable_turn_agent(path, turns)
    try:
        log = floor_bench.StatementLog(store._writer._conn)  # type: ignore[attr-defined]
        log.recording = True
        for i in range(runs):
            binding = DurableBinding(runtime, f"sql-{i}", TURN_HANDLERS)
            await agent.run("Check the items.", durable=binding)
        log.recording = False
    finally:
        await store.close()
    return floor_bench.replayed_s(copy, log.statements, "FULL") / (runs * turns) * 1e6


async def agent_turn_frames(path: str, turns: int) -> float:
    """WAL frames per durable agent turn (two runs of ``turns`` turns after a warm-up run)."""
    agent, store, runtime = durable_turn_agent(path, turns)
    try:
        for i in range(3):
            binding = DurableBinding(runtime, f"frames-{i}", TURN_HANDLERS)
            if i == 1:
                frames = floor_bench.WalFrames(path)
                frames.reset()
            await agent.run("Check the items.", durable=binding)
        return frames.count() / (2 * turns)
    finally:
        await store.close()


async def concurrent_steps_per_s(path: str, runs: int, steps: int) -> float:
    """``runs`` workflows of ``steps`` steps each, concurrently in one process (FULL)."""
    store = zincir.open_store(path)
    try:
        contexts = [await WorkflowContext.open(store, f"run-{r}") for r in range(runs)]

        async def drive(wf: WorkflowContext) -> None:
            for i in range(steps):
                await wf.step(f"step-{i}", lambda i=i: step_result(i))

        started = time.perf_counter()
        await asyncio.gather(*(drive(wf) for wf in contexts))
        elapsed = time.perf_counter() - started
        for wf in contexts:
            await wf.close()
        return runs * steps / elapsed
    finally:
        await store.close()


async def build_long_run(path: str, events: int, checkpoint_at: int) -> str:
    """A run of ``events`` events with an accepted checkpoint at ``checkpoint_at``: rounds of
    a model response asking for tools, then each tool's result, as an agent loop records."""
    store = zincir.open_store(path, synchronous="normal")
    try:
        ctx = await AgentContext.create(store, name="long", config={"goal": "resume"})

        async def fill(until: int) -> None:
            counter = (await store.get_run(ctx.run_id) or {})["last_seq"]
            while counter < until:
                room = max((until - counter - 1) // 2, 0)
                calls = [
                    ToolCall(f"c{counter}-{k}", "lookup", {"k": k}) for k in range(min(4, room))
                ]
                await ctx.record_response(PAYLOAD, calls, "tool_use")
                for call in calls:
                    await ctx.record_tool_result(call.id, step_result(counter))
                counter += 1 + 2 * len(calls)

        async def accept(candidate: CheckpointCandidate) -> Verification:
            return Verification(True, {"ok": True})

        await fill(checkpoint_at - 2)
        await ctx.checkpoint({"completed": ["first 90%"], "remaining": ["the rest"]}, accept)
        await fill(events)
        await ctx.release()
        return ctx.run_id
    finally:
        await store.close()


RESUME_CHILD = """
import asyncio, json, os, sys, time
sys.path.insert(0, sys.argv[3])
import zincir
def resident_kb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
async def main():
    store = zincir.open_store(sys.argv[1])
    ctx = await zincir.AgentContext.recover(store, sys.argv[2])
    before = resident_kb()
    started = time.perf_counter()
    state = await ctx.state()
    elapsed = time.perf_counter() - started
    after = resident_kb()
    await ctx.close(); await store.close()
    print(json.dumps({"ms": elapsed * 1e3, "rss_mb": (after - before) / 1024,
                      "events": len(state.events), "round": state.checkpoint.round}))
asyncio.run(main())
"""


def resume_figures(path: str, run_id: str) -> dict[str, float]:
    """state() in a fresh process: latency and peak RSS growth."""
    output = subprocess.run(
        [sys.executable, "-c", RESUME_CHILD, path, run_id, str(HERE.parent / "src")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(output))


def inspector_page_ms(path: str, run_id: str, events: int) -> dict[str, float]:
    """The inspector's run page of a long run (first and deepest event page, in-process
    ASGI), beside the bare SQL of one page of events read by sequence number."""
    import warnings

    with warnings.catch_warnings():  # starlette's TestClient warns about httpx at import
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from zincir.inspector import create_app
    from zincir.inspector._db import EVENT_PAGE_SIZE

    address = "127.0.0.1:8787"
    figures: dict[str, float] = {}
    app = create_app(path, address=address)
    with TestClient(app, base_url=f"http://{address}") as client:
        deep = events - EVENT_PAGE_SIZE
        urls = {"first": f"/runs/{run_id}", "deep": f"/runs/{run_id}?after_seq={deep}"}
        for label, url in urls.items():
            assert client.get(url).status_code == 200
            samples = []
            for _ in range(10):
                started = time.perf_counter()
                response = client.get(url)
                samples.append((time.perf_counter() - started) * 1e3)
                assert response.status_code == 200
            figures[f"inspector_{label}_page_ms"] = median_of(samples)
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    samples = []
    for _ in range(10):
        started = time.perf_counter()
        rows = conn.execute(
            "SELECT seq, type, payload, created_at FROM events WHERE run_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (run_id, deep, EVENT_PAGE_SIZE),
        ).fetchall()
        [json.loads(payload) for _, _, payload, _ in rows]
        samples.append((time.perf_counter() - started) * 1e3)
    conn.close()
    figures["inspector_page_sql_ms"] = median_of(samples)
    return figures


async def claims_per_s(path: str, runs: int) -> float:
    """A ResumeWorker claiming ``runs`` expired runs (handlers complete at once)."""
    store = zincir.open_store(path, synchronous="normal")
    try:
        for r in range(runs):
            ctx = await AgentContext.create(
                store, name=f"abandoned-{r}", lease_ttl=timedelta(milliseconds=30)
            )
            await ctx._heartbeat.stop()
        await asyncio.sleep(0.1)
        done = asyncio.Event()
        claimed = 0

        async def handler(ctx: AgentContext) -> None:
            nonlocal claimed
            claimed += 1
            await ctx.complete()
            if claimed == runs:
                done.set()

        worker = (
            zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=30))
            .poll_interval(timedelta(milliseconds=5))
            .max_concurrency(64)
        )
        started = time.perf_counter()
        await worker.run(handler, done.wait())
        return runs / (time.perf_counter() - started)
    finally:
        await store.close()


# -- peers ---------------------------------------------------------------------------------


def peer_us(python: str, system: str, path: str, n: int) -> float:
    """Per-step cost of a peer, measured by benchmarks/peers_child.py in its own venv."""
    output = subprocess.run(
        [python, str(HERE / "peers_child.py"), system, path, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return float(json.loads(output.strip().splitlines()[-1])["us_per_step"])


def peer_run(python: str, system: str, path: str, n: int) -> tuple[float, int]:
    """A peer's per-step cost and the bytes it stored (``peers_child``'s savers)."""
    output = subprocess.run(
        [python, str(HERE / "peers_child.py"), system, path, str(n)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    found = json.loads(output.strip().splitlines()[-1])
    return float(found["us_per_step"]), int(found["bytes"])


def agent_peer_us(python: str, bench: Bench, runs: int) -> float | None:
    """A pydantic-ai turn with DBOS durability; None (and a note) when the peer venv lacks
    ``pydantic-ai-slim[dbos]``."""
    try:
        return peer_us(python, "pydantic_ai_dbos", bench.db("pydantic-ai-dbos"), runs)
    except (OSError, subprocess.CalledProcessError) as error:
        lines = (getattr(error, "stderr", "") or str(error)).strip().splitlines()
        why = lines[-1] if lines else str(error)
        bench.notes["pydantic_ai_dbos"] = (
            f"skipped, install pydantic-ai-slim[dbos] in the peers venv ({why})"
        )
        return None


def pydantic_ai_rounds(
    python: str, bench: Bench, runs: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The pydantic-ai turn on DBOS, on ZincirDurability and with no durability, and
    zincir.agent's durable turn, measured in turn within each round (``bench.repeat``
    rounds): this machine's speed drifts by 2-4x within an hour, so each ratio is taken
    within a round and the medians are reported."""
    from pydantic_ai_bench import pydantic_ai_turn_us

    samples: dict[str, list[float]] = {}
    for index in range(bench.repeat if not bench.quick else 1):
        dbos = agent_peer_us(python, bench, runs)
        zincir_turn = run_async(pydantic_ai_turn_us(bench.db(f"pai-zincir-{index}"), runs))
        plain = run_async(pydantic_ai_turn_us(bench.db(f"pai-plain-{index}"), runs, durable=False))
        nothing = run_async(
            pydantic_ai_turn_us(bench.db(f"pai-nothing-{index}"), runs, keep_nothing=True)
        )
        _, durable = run_async(agent_turn_us(bench.db(f"pai-agent-{index}"), runs, 5))
        round_ = {
            "pydantic_ai_zincir_durability_turn_us": zincir_turn,
            "pydantic_ai_plain_turn_us": plain,
            "pydantic_ai_keep_nothing_turn_us": nothing,
        }
        if dbos is not None:
            round_ |= {
                "pydantic_ai_dbos_turn_us": dbos,
                "pydantic_ai_dbos_over_agent_turn": dbos / durable,
                "pydantic_ai_dbos_over_zincir_durability": dbos / zincir_turn,
                # The most any durability capability could reach: durability that cost nothing.
                "pydantic_ai_dbos_over_plain": dbos / plain,
                # The most an engine on pydantic-ai's durability base could reach: the
                # capability's machinery and the run's lease, no operation record kept.
                "pydantic_ai_dbos_over_keep_nothing": dbos / nothing,
            }
        for name, value in round_.items():
            samples.setdefault(name, []).append(value)
    medians = {name: median_of(values) for name, values in samples.items()}
    figures = {name: value for name, value in medians.items() if name.endswith("_us")}
    return figures, {name: value for name, value in medians.items() if name not in figures}


def langgraph_graph_us(
    path: str, n: int, saver: str = "full", graph: str = "ring", asynchronous: bool = False
) -> tuple[float, int]:
    """µs per super-step of ``graph`` (``peers_child.graph_us``) on ``ZincirSaver``
    (``asynchronous``: ``AsyncZincirSaver``) at ``synchronous`` ``saver`` ("full" or
    "normal"), or on LangGraph's ``InMemorySaver`` ("memory"), and the bytes the saver
    stored: measured by ``peers_child`` in a fresh process of this interpreter, as the peer's
    savers are in theirs (not in this one, which has run every other section)."""
    from peers_child import saver_system

    if saver == "memory":
        system = saver_system("inmemorysaver", graph)
    else:
        system = saver_system("zincirsaver", graph, saver, asynchronous)
    return peer_run(sys.executable, system, path or str(Path(tempfile.mkdtemp()) / "m.db"), n)


LANGGRAPH_CASES = [
    (graph, sync, asynchronous)
    for graph in ("ring", "messages")
    for asynchronous in (False, True)
    for sync in ("full", "normal")
]
"""The (graph, synchronous, async) cases both savers run: the ring (``step_graph``) and the
chat of ``CHAT_STEPS`` messages, at equal durability, sync and async."""


def _case_name(graph: str, sync: str, asynchronous: bool) -> str:
    """``graph`` (the ring, the figures' historical name) or ``messages``, then
    ``_async`` and ``_normal`` where they apply."""
    name = "graph" if graph == "ring" else "messages"
    return name + ("_async" if asynchronous else "") + ("_normal" if sync == "normal" else "")


def langgraph_graph_steps_per_s(
    python: str, bench: Bench, n: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Super-steps per second of the ring graph and of the 100-message chat on ZincirSaver and
    SqliteSaver (peers venv) at equal durability (both FULL, both NORMAL), sync and async
    (AsyncZincirSaver, AsyncSqliteSaver), each pair run back to back (ratios: medians of the
    pairs), InMemorySaver on the ring, and the bytes each saver stored per chat super-step.
    Empty (and a note) when LangGraph or ``zincir.integrations.langgraph`` is not
    importable here."""
    try:
        import langgraph.checkpoint.memory  # noqa: F401

        import zincir.integrations.langgraph  # noqa: F401
    except ImportError as error:
        bench.notes["langgraph_graph"] = (
            f"skipped, LangGraph is not importable here, pip install -e '.[dev]' ({error})"
        )
        return {}, {}
    from peers_child import saver_system

    samples: dict[str, list[float]] = {}
    over: dict[str, list[float]] = {}

    def add(into: dict[str, list[float]], name: str, value: float) -> None:
        into.setdefault(name, []).append(value)

    for _ in range(bench.repeat if not bench.quick else 1):
        for graph, sync, asynchronous in LANGGRAPH_CASES:
            case = _case_name(graph, sync, asynchronous)
            ours, our_bytes = langgraph_graph_us(
                bench.db(f"lg-zincir-{case}"), n, sync, graph, asynchronous
            )
            system = saver_system("sqlitesaver", graph, sync, asynchronous)
            theirs, their_bytes = peer_run(python, system, bench.db(f"lg-{system}"), n)
            suffix = "_normal" if sync == "normal" else ""
            kind = case.removesuffix("_normal")  # graph, graph_async, messages, ...
            add(samples, f"langgraph_{kind}_zincir{suffix}_steps_per_s", 1e6 / ours)
            add(samples, f"langgraph_{kind}_sqlitesaver{suffix}_steps_per_s", 1e6 / theirs)
            add(over, f"zincir{suffix}_langgraph_{kind}_over_sqlitesaver{suffix}", theirs / ours)
            if graph == "messages" and not asynchronous:
                steps = (max(1, n // 100) + 1) * 100  # the chats and the warm-up's
                add(samples, f"langgraph_messages_zincir{suffix}_bytes_per_step", our_bytes / steps)
                add(
                    samples,
                    f"langgraph_messages_sqlitesaver{suffix}_bytes_per_step",
                    their_bytes / steps,
                )
                add(
                    over, f"zincir{suffix}_messages_bytes_over_sqlitesaver", our_bytes / their_bytes
                )
        memory, _ = langgraph_graph_us("", n, saver="memory")
        add(samples, "langgraph_graph_inmemory_steps_per_s", 1e6 / memory)
    figures = {name: median_of(values) for name, values in samples.items()}
    ratios = {name: median_of(values) for name, values in over.items()}
    # The historical name of the ring's sync FULL ratio.
    ratios["zincir_langgraph_over_sqlitesaver"] = ratios.pop(
        "zincir_langgraph_graph_over_sqlitesaver"
    )
    ratios["inmemory_langgraph_over_sqlitesaver"] = (
        figures["langgraph_graph_inmemory_steps_per_s"]
        / figures["langgraph_graph_sqlitesaver_steps_per_s"]
    )
    return figures, ratios


# -- the run ------------------------------------------------------------------------------


def timed(label: str, action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    value = action()
    print(f"  {label:<28} {time.perf_counter() - started:6.1f} s", file=sys.stderr)
    return value


def run_async(coroutine: Awaitable[Any]) -> Any:
    async def wrap() -> Any:
        return await coroutine

    return asyncio.run(wrap())


def frame_figures(bench: Bench) -> dict[str, float]:
    """WAL frames (pages written) per step of each step figure, and per agent turn."""
    frames = {
        "raw_frames_per_step": floor_bench.frames_per_step(
            floor_bench.raw_stepper(path := bench.db("frames-raw"), "NORMAL", step_result), path
        ),
        "step_frames_per_step": run_async(step_frames(bench.db("frames-step"))),
        "step_ahead_frames_per_step": run_async(
            step_frames(bench.db("frames-step-ahead"), ahead=True)
        ),
    }
    for label, lean in (("sql", False), ("lean_sql", True)):
        opened = floor_bench.floor_stepper(
            path := bench.db(f"frames-{label}"), "NORMAL", step_result, lean=lean
        )
        frames[f"step_{label}_frames_per_step"] = floor_bench.frames_per_step(opened, path)
    frames["agent_turn_frames"] = run_async(agent_turn_frames(bench.db("frames-turn"), 5))
    return frames


def long_run_section(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """benchmarks/long_run.py: one agent run of ``--long-run-turns`` turns (100 quick) and
    the same conversation on SqliteSaver; a full run rewrites
    docs/operations/performance/long-run.{md,png}."""
    turns = 100 if bench.quick else args.long_run_turns
    try:
        result: dict[str, Any] = long_run.measure(
            turns,
            folder=str(bench.folder),
            resumes=3 if bench.quick else 5,
            peers_python=args.peers_python,
            notes=bench.notes,
        )
    except RuntimeError as error:
        bench.notes["long_run"] = str(error)
        return {"figures": {}, "ratios": {}}
    if not bench.quick:
        try:
            long_run.write_doc(result, turns, None)
        except ImportError as error:
            bench.notes["long_run_doc"] = (
                f"docs/operations/performance/long-run.md not written ({error})"
            )
    return result


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it ("" elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def measure(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args.quick, 3 if args.quick else args.repeat)
    figures = bench.figures
    n_seq = bench.n(1000, 300)

    pair_ratios: dict[str, float] = {}

    def paired(
        name_raw: str, name_ours: str, sync: str, single: bool = False, ahead: bool = False
    ) -> None:
        """Alternate baseline and zincir runs; fsync cost drifts, so pair them up."""
        raws, ours = [], []
        for _ in range(bench.repeat):
            raws.append(raw_step_us(bench.db(f"raw-{sync}"), sync, n_seq))
            ours.append(
                run_async(
                    step_us(
                        bench.db(f"step-{sync}"), sync, n_seq, single_process=single, ahead=ahead
                    )
                )
            )
        figures.setdefault(name_raw, median_of(raws))
        figures[name_ours] = median_of(ours)
        pair_ratios[name_ours] = median_of([o / r for o, r in zip(ours, raws, strict=True)])

    timed("raw + step FULL", lambda: paired("raw_full_us", "step_full_us", "full"))
    timed("raw + step NORMAL", lambda: paired("raw_normal_us", "step_normal_us", "normal"))
    timed(
        "raw + single-process step NORMAL",
        lambda: paired("raw_normal_us", "step_normal_single_us", "normal", single=True),
    )
    timed(
        "raw + claim-ahead step NORMAL",
        lambda: paired("raw_normal_us", "step_ahead_normal_us", "normal", ahead=True),
    )
    timed(
        "raw + claim-ahead step FULL",
        lambda: paired("raw_full_us", "step_ahead_full_us", "full", ahead=True),
    )
    for label, lean in (("sql", False), ("lean_sql", True)):
        figures[f"step_{label}_normal_us"] = timed(
            f"{label} floor, one step",
            lambda lean=lean: median_of(
                [
                    floor_bench.floor_step_us(
                        bench.db(f"floor-{lean}"), "NORMAL", n_seq, step_result, lean=lean
                    )
                    for _ in range(bench.repeat)
                ]
            ),
        )
        figures[f"concurrent64_{label}_steps_per_s"] = timed(
            f"{label} floor, 64 runs",
            lambda lean=lean: floor_bench.floor_concurrent_steps_per_s(
                bench.db(f"floor64-{lean}"), 64, bench.n(200, 50), step_result, lean=lean
            ),
        )
    figures.update(timed("WAL frames per step", lambda: frame_figures(bench)))
    figures["agent_cycle_us"] = timed(
        "agent cycle", lambda: run_async(agent_cycle_us(bench.db("cycle"), bench.n(1000, 300)))
    )
    execute, replay = timed(
        "runtime", lambda: run_async(runtime_us(bench.db("runtime"), bench.n(2000, 500)))
    )
    figures["runtime_execute_us"], figures["runtime_replay_us"] = execute, replay
    direct, durable = timed(
        "agent turn",
        lambda: run_async(agent_turn_us(bench.db("agent-turn"), bench.n(100, 30), 5)),
    )
    figures["agent_turn_direct_us"], figures["agent_turn_durable_us"] = direct, durable
    figures["agent_turn_overhead_us"] = durable - direct
    figures["agent_turn_sql_us"] = timed(
        "agent turn statements",
        lambda: run_async(agent_turn_sql_us(bench.db("agent-turn-sql"), bench.n(60, 20), 5)),
    )
    figures["concurrent64_steps_per_s"] = timed(
        "64 concurrent runs",
        lambda: run_async(concurrent_steps_per_s(bench.db("concurrent"), 64, bench.n(200, 50))),
    )
    events = bench.n(100_000, 20_000)
    long_db = bench.db("long")
    run_id = timed(
        "build 100k-event run", lambda: run_async(build_long_run(long_db, events, events * 9 // 10))
    )
    resumed = timed("resume", lambda: resume_figures(long_db, run_id))
    figures["resume_100k_ms"] = resumed["ms"]
    figures["resume_100k_rss_mb"] = resumed["rss_mb"]
    figures.update(timed("inspector pages", lambda: inspector_page_ms(long_db, run_id, events)))
    figures["claims_per_s"] = timed(
        "claims", lambda: run_async(claims_per_s(bench.db("claims"), bench.n(1000, 300)))
    )
    from prune_bench import measure as prune_measure

    figures.update(timed("prune beside a writer", lambda: prune_measure(bench, run_async)))
    from prune_bench import measure_compaction

    figures.update(
        timed("compact a long run", lambda: measure_compaction(bench, run_async, resume_figures))
    )

    from stream_bench import measure as stream_measure

    stream_figures, stream_ratios = timed(
        "streamed turn, durable stream", lambda: stream_measure(bench, run_async)
    )
    figures.update(stream_figures)

    from encryption_bench import measure as encryption_measure

    encryption_figures, encryption_ratios = timed(
        "step and turn, sealed", lambda: encryption_measure(bench, run_async)
    )
    figures.update(encryption_figures)

    from queue_bench import measure as queue_measure

    queue_figures, queue_ratios = timed(
        "queues, 4 processes",
        lambda: queue_measure(bench.quick, postgres=not args.no_postgres),
    )
    figures.update(queue_figures)

    from openai_agents_bench import measure as openai_agents_measure

    openai_agents_figures, openai_agents_ratios = timed(
        "OpenAI Agents SDK turn", lambda: openai_agents_measure(bench, run_async)
    )
    figures.update(openai_agents_figures)

    long = timed("long run", lambda: long_run_section(bench, args))
    figures.update(long["figures"])

    ratios: dict[str, float] = {
        **stream_ratios,
        **encryption_ratios,
        **queue_ratios,
        **openai_agents_ratios,
        "step_full_over_raw_full": pair_ratios["step_full_us"],
        "step_normal_over_raw_normal": pair_ratios["step_normal_us"],
        "step_normal_single_over_raw_normal": pair_ratios["step_normal_single_us"],
        "step_ahead_normal_over_raw_normal": pair_ratios["step_ahead_normal_us"],
        "step_ahead_full_over_raw_full": pair_ratios["step_ahead_full_us"],
        "concurrent64_over_raw_full_seq": figures["concurrent64_steps_per_s"]
        / (1e6 / figures["raw_full_us"]),
        "step_normal_over_step_sql_normal": figures["step_normal_us"]
        / figures["step_sql_normal_us"],
        "step_sql_normal_over_raw_normal": figures["step_sql_normal_us"] / figures["raw_normal_us"],
        "step_lean_sql_normal_over_raw_normal": figures["step_lean_sql_normal_us"]
        / figures["raw_normal_us"],
        "concurrent64_sql_over_raw_full_seq": figures["concurrent64_sql_steps_per_s"]
        / (1e6 / figures["raw_full_us"]),
        "concurrent64_lean_sql_over_raw_full_seq": figures["concurrent64_lean_sql_steps_per_s"]
        / (1e6 / figures["raw_full_us"]),
        "agent_turn_overhead_over_raw_full": figures["agent_turn_overhead_us"]
        / figures["raw_full_us"],
        "agent_turn_sql_over_raw_full": figures["agent_turn_sql_us"] / figures["raw_full_us"],
        "agent_turn_overhead_over_agent_turn_sql": figures["agent_turn_overhead_us"]
        / figures["agent_turn_sql_us"],
    }
    ratios.update(long["ratios"])
    if args.peers:
        python = args.peers_python
        n_peer = bench.n(1000, 300)
        for peer in ("dbos", "langgraph"):

            def adjacent(peer: str = peer) -> tuple[float, dict[str, float]]:
                """Each peer run sits between two zincir runs of the same steps."""
                costs, ratios_by_sync = [], {"full": [], "normal": []}
                for _ in range(bench.repeat if not bench.quick else 1):
                    full = run_async(step_us(bench.db("adj-full"), "full", n_peer))
                    normal = run_async(step_us(bench.db("adj-normal"), "normal", n_peer))
                    cost = peer_us(python, peer, bench.db(peer), n_peer)
                    costs.append(cost)
                    ratios_by_sync["full"].append(cost / full)
                    ratios_by_sync["normal"].append(cost / normal)
                return median_of(costs), {k: median_of(v) for k, v in ratios_by_sync.items()}

            cost, peer_ratios = timed(peer, adjacent)
            figures[f"{peer}_step_us"] = cost
            ratios[f"{peer}_over_step_full"] = peer_ratios["full"]
            ratios[f"{peer}_over_step_normal"] = peer_ratios["normal"]
        graph_figures, graph_ratios = timed(
            "langgraph graph",
            lambda: langgraph_graph_steps_per_s(python, bench, bench.n(1000, 300)),
        )
        figures.update(graph_figures)
        ratios.update(graph_ratios)
    if args.peers or args.agent_peer:
        peer_figures, peer_ratios = timed(
            "pydantic-ai turns, interleaved",
            lambda: pydantic_ai_rounds(args.peers_python, bench, bench.n(60, 20)),
        )
        figures.update(peer_figures)
        ratios.update(peer_ratios)
    if not args.no_postgres:
        from postgres_bench import measure as postgres_measure

        pg_figures, pg_ratios = timed(
            "postgres",
            lambda: postgres_measure(
                bench, step_us, run_async, peer_us, args.peers_python if args.peers else None
            ),
        )
        figures.update(pg_figures)
        ratios.update(pg_ratios)
    if args.temporal:
        from temporal_bench import measure as temporal_measure

        temporal = timed("temporal", lambda: run_async(temporal_measure(bench.n(30, 10))))
        figures.update({f"temporal_{k}": v for k, v in temporal.items()})
        if "runtime_over_raw" in temporal:
            ratios["temporal_execute_over_raw"] = temporal["runtime_over_raw"]
    return {
        "figures": figures,
        "ratios": ratios,
        "notes": bench.notes,
        "machine": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu_model(),
            "python": platform.python_version(),
            "sqlite": apsw.sqlite_lib_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "quick": args.quick,
            "peers": args.peers,
            "temporal": args.temporal,
        },
    }


TARGETS = {
    "step_full_over_raw_full": ("<=", 1.1),
    "step_normal_single_over_raw_normal": ("<=", 2.0),
    "step_ahead_normal_over_raw_normal": ("<=", 2.5),
    "step_ahead_full_over_raw_full": ("<=", 1.1),
    "step_normal_over_raw_normal": ("<=", 3.0),
    "step_normal_over_step_sql_normal": ("<=", 1.1),
    "concurrent64_over_raw_full_seq": (">=", 6.0),
    "dbos_over_step_full": (">=", 5.0),
    "langgraph_over_step_full": (">=", 4.0),
    "dbos_over_step_normal": (">=", 20.0),
    "langgraph_over_step_normal": (">=", 15.0),
    "temporal_execute_over_raw": ("<=", 1.2),
    "agent_turn_overhead_over_raw_full": ("<=", 5.0),
    "pydantic_ai_dbos_over_agent_turn": (">=", 3.0),
    "pydantic_ai_dbos_over_zincir_durability": (">=", 3.0),
    "zincir_langgraph_over_sqlitesaver": (">=", 1.0),
    "zincir_normal_langgraph_graph_over_sqlitesaver_normal": (">=", 1.0),
    "zincir_langgraph_graph_async_over_sqlitesaver": (">=", 1.0),
    "zincir_normal_langgraph_graph_async_over_sqlitesaver_normal": (">=", 1.0),
    "zincir_langgraph_messages_over_sqlitesaver": (">=", 1.0),
    "zincir_normal_langgraph_messages_over_sqlitesaver_normal": (">=", 1.0),
    "zincir_langgraph_messages_async_over_sqlitesaver": (">=", 1.0),
    "zincir_normal_langgraph_messages_async_over_sqlitesaver_normal": (">=", 1.0),
    "dbos_pg_over_pg_step": (">=", 3.0),
    **long_run.TARGETS,
}
FIGURE_TARGETS = {
    "resume_100k_ms": ("<", 500.0),
    "resume_100k_rss_mb": ("<", 50.0),
    "claims_per_s": (">=", 2000.0),
    **long_run.FIGURE_TARGETS,
}


def verdict(value: float, target: tuple[str, float] | None) -> str:
    if target is None:
        return ""
    return f"{target[0]} {target[1]:g}  {'met' if long_run.meets(value, target) else 'MISSED'}"


def print_table(result: dict[str, Any]) -> None:
    print(f"{'figure':<42} {'value':>12}  target")
    for name, value in result["figures"].items():
        print(f"{name:<42} {value:>12.1f}  {verdict(value, FIGURE_TARGETS.get(name))}")
    print()
    print(f"{'ratio':<42} {'value':>12}  target")
    for name, value in result["ratios"].items():
        print(f"{name:<42} {value:>12.2f}  {verdict(value, TARGETS.get(name))}")
    for name, note in result.get("notes", {}).items():
        print(f"note: {name}: {note}")
    machine = result["machine"]
    print(
        f"\nPython {machine['python']}, SQLite {machine['sqlite']}, {machine['cpus']} CPUs, "
        f"{machine['platform']}{' (quick)' if machine['quick'] else ''}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under 60 s")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--repeat", type=int, default=5, help="runs per paired figure")
    parser.add_argument("--peers", action="store_true", help="DBOS and LangGraph (bench-peers)")
    parser.add_argument(
        "--agent-peer", action="store_true", help="the agent turn on pydantic-ai + DBOS only"
    )
    parser.add_argument("--peers-python", default=str(HERE.parent / ".venv-peers/bin/python"))
    parser.add_argument(
        "--long-run-turns", type=int, default=1000, help="turns of the long-run section"
    )
    parser.add_argument("--temporal", action="store_true", help="TemporalRuntime vs raw")
    parser.add_argument(
        "--no-postgres", action="store_true", help="skip the PostgreSQL figures (no server)"
    )
    args = parser.parse_args(argv)
    result = measure(args)
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.flush()
    if args.temporal:
        # temporalio's background threads can abort interpreter shutdown (sdk-python#300).
        os._exit(0)


if __name__ == "__main__":
    main()
