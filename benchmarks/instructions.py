"""CPU instructions per step and per agent turn, counted by valgrind's callgrind.

    python benchmarks/instructions.py [--jobs 2]

Wall-clock figures on a shared VM drift by 2-4x within an hour; instruction counts do not,
so a change to zincir's own code is judged here. Each workload runs twice in a child process
under ``valgrind --tool=callgrind``, with a small and a large count; the difference divided
by the difference in counts is the cost of one unit, without the interpreter's start-up and
imports. Instructions in the kernel (the WAL's write and fsync calls) are not counted: the
floors' wall-clock time includes them, these figures do not.

Workloads (one run each): at NORMAL, ``raw`` the raw INSERT + COMMIT loop, ``floor`` and
``lean`` the bare SQL of a step on zincir's schema and on the lean prototype
(floor_bench.py), ``step`` a ``WorkflowContext.step``, ``step_ahead`` the same step
claiming the next with its result (``next=``), ``operation`` one ``LocalRuntime.execute``
of a trivial inline handler under the run's lease (claim, then record and its event); at
FULL, as ``make bench`` runs them, ``turn`` and ``direct_turn`` one turn of the benchmark
agent (a model request and three tool calls) on a LocalRuntime and without ``durable=``,
``pydantic_ai_turn`` and ``pydantic_ai_plain_turn`` the same turn on pydantic-ai with
``ZincirDurability`` and without any durability (pydantic_ai_bench.py); ``sealed_step`` and
``sealed_turn`` the step and the durable turn on a store sealing its payloads
(``encryption=``, AES-256-GCM); at NORMAL, one super-step of LangGraph's benchmark graphs
(peers_child.py: ``ring`` of small nodes, ``chat`` of 100 messages, ``durability="sync"``)
on ``ZincirSaver``, on ``SqliteSaver`` (run by the peers' venv, ``make bench-peers``'s
``.venv-peers``) and on ``InMemorySaver`` (LangGraph's own cost: a saver's is the
difference), and the ring through ``ainvoke`` on ``AsyncZincirSaver`` and
``AsyncSqliteSaver`` (``azincirsaver_ring``, ``asqlitesaver_ring``). ``--workloads`` counts
only those named.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import floor_bench  # noqa: E402

SIZES = {
    "raw": (500, 2500),
    "floor": (200, 1200),
    "lean": (200, 1200),
    "step": (200, 1200),
    "step_ahead": (200, 1200),
    "operation": (200, 1200),
    "turn": (2, 12),
    "direct_turn": (2, 12),
    "pydantic_ai_turn": (2, 8),
    "pydantic_ai_plain_turn": (2, 8),
    "sealed_step": (200, 1200),
    "sealed_turn": (2, 12),
    **{
        f"{saver}_{graph}": (100, 600)
        for graph in ("ring", "chat")
        for saver in ("zincirsaver", "sqlitesaver", "inmemorysaver")
    },
    "azincirsaver_ring": (100, 600),
    "asqlitesaver_ring": (100, 600),
}
"""The small and large count of each workload (turns are counted in runs of five; the
savers' super-steps in threads of 100 on the chat)."""
TURNS = 5
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"
"""The interpreter with LangGraph's ``SqliteSaver`` (``make bench-peers`` installs it)."""


def _saver_command(workload: str, count: int) -> list[str]:
    """The command that runs ``count`` super-steps of a saver workload (``peers_child``)."""
    from peers_child import saver_system

    saver, graph = workload.rsplit("_", 1)
    asynchronous = saver in ("azincirsaver", "asqlitesaver")
    system = saver_system(
        saver.removeprefix("a") if asynchronous else saver,
        "messages" if graph == "chat" else graph,
        asynchronous=asynchronous,
    )
    python = str(PEERS_PYTHON) if saver.endswith("sqlitesaver") else sys.executable
    path = os.path.join(tempfile.mkdtemp(prefix="zincir-instructions-"), "graph.db")
    return [python, str(HERE / "peers_child.py"), system, path, str(count)]


def child(workload: str, count: int) -> None:
    """Run ``count`` units of ``workload`` in a fresh database (the process being counted)."""
    from run import step_result

    folder = tempfile.mkdtemp(prefix="zincir-instructions-")
    path = os.path.join(folder, "bench.db")
    if workload == "raw":
        conn, step = floor_bench.raw_stepper(path, "NORMAL", step_result)
    elif workload in ("floor", "lean"):
        conn, step = floor_bench.floor_stepper(path, "NORMAL", step_result, lean=workload == "lean")
    else:
        asyncio.run(_zincir(workload, count, path))
        return
    for i in range(count):
        step(i)
    conn.close()


async def _zincir(workload: str, count: int, path: str) -> None:
    from run import TURN_HANDLERS, durable_turn_agent, warm_workflow

    import zincir
    from zincir.agent import DurableBinding

    sealed = workload.startswith("sealed_")
    keys = zincir.Encryption({"bench": bytes(range(32))}, "bench") if sealed else None
    workload = workload.removeprefix("sealed_")

    if workload in ("step", "step_ahead"):
        ahead = workload == "step_ahead"
        async with warm_workflow(
            path, "normal", 0, "instructions", ahead=ahead, encryption=keys
        ) as step:
            for i in range(count):
                await step(i)
        return
    if workload == "operation":
        await _operations(path, count)
        return
    if workload.startswith("pydantic_ai"):
        from pydantic_ai_bench import pydantic_ai_turn_us

        await pydantic_ai_turn_us(path, count, durable=workload == "pydantic_ai_turn")
        return
    agent, store, runtime = durable_turn_agent(path, TURNS, keys)
    try:
        for i in range(count):
            if workload == "turn":
                binding = DurableBinding(runtime, f"run-{i}", TURN_HANDLERS)
                await agent.run("Check the items.", durable=binding)
            else:
                await agent.run("Check the items.")
    finally:
        await store.close()


async def _operations(path: str, count: int) -> None:
    """``count`` operations of one run on a LocalRuntime (NORMAL), after a warm-up."""
    from run import step_result

    import zincir
    from zincir import AgentContext, HandlerRegistry, Invocation, LocalRuntime, OperationKind

    store = zincir.open_store(path, synchronous="normal")
    try:
        runtime = LocalRuntime(store, HandlerRegistry())
        ctx = await AgentContext.create(store, "instructions")

        async def body(invocation: Invocation, request: object) -> object:
            return step_result(invocation.sequence)

        for i in range(-20, count):
            invocation = Invocation(
                run_id=ctx.run_id,
                step_id="tool.call",
                sequence=i + 20,
                kind=OperationKind.TOOL_CALL,
                handler_id="instructions",
                input_json=f'{{"i":{i}}}',
            )
            await runtime.execute(invocation, inline=body)
        await ctx.complete({"operations": count})
    finally:
        await store.close()


def collected(workload: str, count: int) -> int:
    """Instructions callgrind counted for ``count`` units of ``workload``."""
    if "saver_" in workload:
        command = _saver_command(workload, count)
    else:
        command = [sys.executable, __file__, "--child", workload, str(count)]
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count for {workload}: {result.stderr[-2000:]}")
    return int(found.group(1))


def per_unit(workload: str, pool: ThreadPoolExecutor) -> float:
    small, large = SIZES[workload]
    counts = list(pool.map(lambda n: collected(workload, n), (small, large)))
    units = (large - small) * (TURNS if workload.endswith("turn") else 1)
    return (counts[1] - counts[0]) / units


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at once")
    parser.add_argument(
        "--workloads",
        type=lambda text: text.split(","),
        default=list(SIZES),
        help=f"comma-separated, of: {', '.join(SIZES)} (default: all)",
    )
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    unknown = sorted(set(args.workloads) - set(SIZES))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose among {', '.join(SIZES)}")
    if not PEERS_PYTHON.exists() and any("sqlitesaver" in w for w in args.workloads):
        sys.exit(
            f"{PEERS_PYTHON} is missing (SqliteSaver's venv): `make bench-instructions` installs it"
        )
    with ThreadPoolExecutor(args.jobs) as pool:
        figures = {name: per_unit(name, pool) for name in SIZES if name in args.workloads}
    print(f"{'instructions per unit':<40} {'value':>12}")
    for name, value in figures.items():
        unit = "turn" if name.endswith("turn") else "super-step" if "saver_" in name else "step"
        print(f"{name + ' per ' + unit:<40} {value:>12,.0f}")
    print()
    ratios = _ratios(figures)
    for name, value in ratios.items():
        print(f"{name:<40} {value:>12.2f}")


def _ratios(figures: dict[str, float]) -> dict[str, float]:
    """The ratios whose workloads were all counted."""
    f = figures
    wanted: dict[str, tuple[tuple[str, ...], Callable[[], float]]] = {
        "step_over_floor": (("step", "floor"), lambda: f["step"] / f["floor"]),
        "step_over_raw": (("step", "raw"), lambda: f["step"] / f["raw"]),
        "step_ahead_over_floor": (("step_ahead", "floor"), lambda: f["step_ahead"] / f["floor"]),
        "operation_over_step": (("operation", "step"), lambda: f["operation"] / f["step"]),
        "lean_over_floor": (("lean", "floor"), lambda: f["lean"] / f["floor"]),
        "turn_overhead_over_step": (
            ("turn", "direct_turn", "step"),
            lambda: (f["turn"] - f["direct_turn"]) / f["step"],
        ),
        "pydantic_ai_overhead_over_turn_overhead": (
            ("pydantic_ai_turn", "pydantic_ai_plain_turn", "turn", "direct_turn"),
            lambda: (
                (f["pydantic_ai_turn"] - f["pydantic_ai_plain_turn"])
                / (f["turn"] - f["direct_turn"])
            ),
        ),
        "sealed_step_over_step": (("sealed_step", "step"), lambda: f["sealed_step"] / f["step"]),
        "sealed_turn_over_turn": (("sealed_turn", "turn"), lambda: f["sealed_turn"] / f["turn"]),
    }
    for graph in ("ring", "chat"):
        ours, theirs, lg = (
            f"{saver}_{graph}" for saver in ("zincirsaver", "sqlitesaver", "inmemorysaver")
        )
        wanted[f"zincirsaver_over_sqlitesaver_{graph}"] = ((ours, theirs), _over(f, ours, theirs))
        # The savers' own cost: a super-step's instructions less LangGraph's (InMemorySaver).
        wanted[f"zincirsaver_own_over_sqlitesaver_own_{graph}"] = (
            (ours, theirs, lg),
            _over(f, ours, theirs, less=lg),
        )
    wanted["azincirsaver_over_asqlitesaver_ring"] = (
        ("azincirsaver_ring", "asqlitesaver_ring"),
        _over(f, "azincirsaver_ring", "asqlitesaver_ring"),
    )
    return {name: ratio() for name, (needs, ratio) in wanted.items() if all(n in f for n in needs)}


def _over(
    figures: dict[str, float], top: str, bottom: str, less: str | None = None
) -> Callable[[], float]:
    """The ratio of two figures, each less ``less``'s, computed when called."""

    def ratio() -> float:
        base = 0.0 if less is None else figures[less]
        return (figures[top] - base) / (figures[bottom] - base)

    return ratio


if __name__ == "__main__":
    main()
