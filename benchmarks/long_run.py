"""Long-run figures for ``make bench``: what one durable agent run costs as it grows.

    python benchmarks/long_run.py [--turns N] [--quick] [--json PATH] [--write]
                                  [--before PATH] [--from PATH] [--peers-python PATH]
                                  [--no-input-limit]

One run of a ``FunctionModel`` agent with one tool, through ``zincir.agent.Runner`` on a
SQLite file with ``synchronous="normal"``, goes on for N turns (a turn: one model request
and its tool call; the tool returns about 2 KB of deterministic text, the model's reply is
short; benchmarks/long_run_peer.py holds the conversation). It runs in a child process,
which reads the database's bytes (main file + WAL after ``wal_checkpoint(TRUNCATE)``, so
the WAL is empty) at chosen turns and times every turn, and is killed (``os._exit``) when
the model is asked for turn N + 1: the run is left unfinished, as a crash leaves it. A new
process then resumes it with ``Runner.resume`` until the model is asked again, timed from
the process's start and from the ``resume`` call. The same conversation runs on LangGraph's
``SqliteSaver`` (a messages graph, one super-step a turn) in the peers' venv, when it exists.

A default ``Runner``'s ``LocalRuntime`` refuses a model request whose input passes 1 MiB;
when the run reaches that, the turn it stopped at is a figure and the run is measured again
with ``LocalRuntime(max_input_bytes=None)`` (``--no-input-limit`` goes there at once).

The windows scale with N: bytes per turn over turns N/20–3N/20 and 9N/10–N (50–150 and
900–1,000 at N = 1,000), the median turn over N/100–N/10 and 9N/10–N (10–100, 900–1,000).
``--write`` rewrites long-run.md and long-run.png (matplotlib) in docs/operations/performance/
from this run; ``--before`` adds a curve from an earlier run's ``--json`` file to the plot;
``--from`` reports (and with ``--write`` writes) a run's ``--json`` file instead of running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from long_run_peer import PROMPT, TOOL, call_id, reply_text, tool_text  # noqa: E402

RUN_ID = "long-run"
FIXED_MARKS = (50, 150, 300, 1000)
MB = 1e6
DOC = HERE.parent / "docs" / "operations" / "performance" / "long-run.md"
PLOT = HERE.parent / "docs" / "operations" / "performance" / "long-run.png"


# -- the zincir run (in child processes) -----------------------------------------------------


def database_bytes(path: str) -> int:
    """The main file + WAL after ``wal_checkpoint(TRUNCATE)``, through APSW: the SQLite
    library the store uses (a second library in the process, such as the standard
    ``sqlite3``'s, would drop the store's file locks when its connection closes)."""
    import apsw

    conn = apsw.Connection(path)
    try:
        conn.set_busy_timeout(30_000)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    wal = path + "-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def build_agent(asked: Any) -> Any:
    """The agent: ``asked(done)`` is called with the turns done each time the model is asked
    (before it answers); the model then asks for the next section."""
    from zincir.agent import Agent, FunctionModel, tool
    from zincir.contract.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

    @tool(name=TOOL)
    async def read_section(section: int) -> str:
        """Read one section of the catalogue."""
        return tool_text(section)

    def model(request: ModelRequest) -> ModelResponse:
        done = (len(request.messages) - 1) // 2  # the prompt, then two messages a turn
        asked(done)
        number = done + 1
        return ModelResponse(
            parts=[
                TextPart(text=reply_text(number)),
                ToolCallPart(
                    tool_call_id=call_id(number), tool_name=TOOL, arguments={"section": number}
                ),
            ]
        )

    return Agent(FunctionModel(model), name="long", tools=[read_section])


def _finish(result: dict[str, Any]) -> None:
    """Print the child's figures and die at once, leaving the run unfinished."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _runner(store: Any, agent: Any, limit: bool) -> Any:
    """A ``Runner`` as an application makes it; ``limit=False`` lifts its runtime's limit
    on an invocation's input (1 MiB), which a long conversation reaches."""
    from zincir.agent import Runner
    from zincir.durable import LocalRuntime

    runner = Runner(store, [agent])
    if not limit:
        runner.runtime = LocalRuntime(store, runner.registry, max_input_bytes=None)
    return runner


def child_build(path: str, turns: int, marks: set[int], limit: bool) -> None:
    """Run the agent until the model is asked for turn ``turns + 1``."""
    import asyncio

    import zincir

    sizes: dict[str, int] = {}
    entered: list[float] = []
    ready: list[float] = []
    started = time.perf_counter()

    def asked(done: int) -> None:
        entered.append(time.perf_counter())
        if done in marks:
            sizes[str(done)] = database_bytes(path)
        if done >= turns:
            _finish(
                {
                    "sizes": sizes,
                    "turn_s": [b - a for a, b in zip(ready, entered[1:], strict=True)],
                    "elapsed_s": time.perf_counter() - started,
                }
            )
        ready.append(time.perf_counter())

    async def main() -> None:
        store = zincir.open_store(path, synchronous="normal")
        runner = _runner(store, build_agent(asked), limit)
        try:
            await runner.run("long", PROMPT, run_id=RUN_ID)
        except Exception as error:  # reported by the parent: how far the run got
            _finish({"error": f"{type(error).__name__}: {error}", "done": len(ready)})
        raise SystemExit("the run finished before its last turn")

    asyncio.run(main())


def child_resume(path: str, limit: bool) -> None:
    """Resume the run in this new process until the model is asked; print when."""
    import asyncio

    import zincir

    called: list[float] = []

    def asked(done: int) -> None:
        now, wall = time.perf_counter(), time.time()
        _finish({"resume_ms": (now - called[0]) * 1e3, "asked_at": wall, "done": done})

    async def main() -> None:
        store = zincir.open_store(path, synchronous="normal")
        runner = _runner(store, build_agent(asked), limit)
        called.append(time.perf_counter())
        await runner.resume(RUN_ID)
        raise SystemExit("the run finished without asking the model")

    asyncio.run(main())


# -- the parent --------------------------------------------------------------------------


def windows(turns: int) -> dict[str, tuple[int, int]]:
    """The turn windows of the figures, scaled to ``turns`` (fixed at 1,000)."""
    return {
        "bytes_early": (turns // 20, 3 * turns // 20),
        "bytes_late": (9 * turns // 10, turns),
        "time_early": (max(turns // 100, 1), turns // 10),
        "time_late": (9 * turns // 10, turns),
    }


def marks_for(turns: int) -> list[int]:
    """The turns whose bytes are read: every 10 (every N/20 for a short run), the fixed
    marks and the windows' ends."""
    every = 10 if turns >= 200 else max(turns // 20, 1)
    chosen = set(range(0, turns + 1, every)) | {turns}
    chosen |= {mark for mark in FIXED_MARKS if mark <= turns}
    for low, high in windows(turns).values():
        chosen |= {low, high}
    return sorted(chosen)


def _flag(limit: bool) -> str:
    return "limit" if limit else "no-limit"


def _child(args: list[str], timeout: float) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = output.stdout.strip().splitlines()
    if output.returncode != 0 or not lines:
        raise RuntimeError(f"long-run child {args[:2]} failed: {output.stderr.strip()[-2000:]}")
    return dict(json.loads(lines[-1]))


def resume_once(path: str, limit: bool = True) -> dict[str, float]:
    """One resume in a new process: ms from its spawn and from ``Runner.resume`` to the
    model being asked."""
    spawned = time.time()
    child = _child(["--child", "resume", path, _flag(limit)], timeout=3600)
    return {
        "resume_ms": child["resume_ms"],
        "resume_process_ms": (child["asked_at"] - spawned) * 1e3,
        "done": child["done"],
    }


def sqlitesaver_run(python: str, path: str, turns: int, marks: list[int]) -> dict[str, Any]:
    """The same conversation on SqliteSaver, in the peers' venv."""
    output = subprocess.run(
        [python, str(HERE / "long_run_peer.py"), path, str(turns), ",".join(map(str, marks))],
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if output.returncode != 0:
        raise RuntimeError(f"SqliteSaver child failed: {output.stderr.strip()[-2000:]}")
    return dict(json.loads(output.stdout.strip().splitlines()[-1]))


def _remove(folder: str, *prefixes: str) -> None:
    """Remove the databases (and their WAL and shm files) named ``prefixes*``."""
    for name in os.listdir(folder):
        if name.startswith(prefixes):
            os.remove(os.path.join(folder, name))


def _per_turn(sizes: dict[str, int], window: tuple[int, int]) -> float:
    low, high = window
    return (sizes[str(high)] - sizes[str(low)]) / (high - low)


def _median_ms(turn_s: list[float], window: tuple[int, int]) -> float:
    low, high = window  # turn k took turn_s[k - 1]
    return statistics.median(turn_s[low - 1 : high]) * 1e3


def measure(
    turns: int,
    *,
    folder: str,
    resumes: int = 5,
    peers_python: str | None = None,
    notes: dict[str, str] | None = None,
    limit: bool = True,
) -> dict[str, Any]:
    """Run both sides and return ``figures``, ``ratios``, ``notes`` and the ``curves``
    (bytes at each mark) of one run of ``turns`` turns (``limit=False``: the runtime's
    input limit lifted)."""
    notes = {} if notes is None else notes
    marks = marks_for(turns)
    spans = windows(turns)
    path = os.path.join(folder, "long-run.db")
    figures: dict[str, float] = {}

    def build(limit: bool) -> tuple[dict[str, Any], float]:
        _remove(folder, "long-run.db")
        started = time.perf_counter()
        built = _child(
            ["--child", "build", path, str(turns), ",".join(map(str, marks)), _flag(limit)], 7200
        )
        return built, time.perf_counter() - started

    built, build_s = build(limit)
    if limit and "InvalidInvocation" in built.get("error", ""):
        # Reported, then measured past it: the figures are those of the run's storage.
        figures["long_run_default_runner_turns"] = built["done"]
        notes["long_run_input_limit"] = (
            f"a default Runner's run stops after {built['done']} turns ({built['error']}); "
            "measured with LocalRuntime(max_input_bytes=None)"
        )
        limit = False
        built, build_s = build(limit)
    if "error" in built:
        raise RuntimeError(
            f"the long run stopped after {built['done']} of {turns} turns ({built['error']})"
        )
    sizes = built["sizes"]
    resumed = [resume_once(path, limit) for _ in range(resumes)]
    assert all(one["done"] == turns for one in resumed), resumed
    content = len(tool_text(turns)) + len(reply_text(turns)) + len(call_id(turns))
    for mark in FIXED_MARKS:
        if mark <= turns:
            figures[f"long_run_db_mb_{mark}"] = sizes[str(mark)] / MB
    early, late = spans["bytes_early"], spans["bytes_late"]
    figures[f"long_run_bytes_per_turn_{early[0]}_{early[1]}"] = _per_turn(sizes, early)
    figures[f"long_run_bytes_per_turn_{late[0]}_{late[1]}"] = _per_turn(sizes, late)
    figures["long_run_turn_content_bytes"] = content
    t_early, t_late = spans["time_early"], spans["time_late"]
    figures[f"long_run_turn_ms_{t_early[0]}_{t_early[1]}"] = _median_ms(built["turn_s"], t_early)
    figures[f"long_run_turn_ms_{t_late[0]}_{t_late[1]}"] = _median_ms(built["turn_s"], t_late)
    figures[f"long_run_resume_{turns}_ms"] = statistics.median(r["resume_ms"] for r in resumed)
    figures[f"long_run_resume_{turns}_process_ms"] = statistics.median(
        r["resume_process_ms"] for r in resumed
    )
    figures["long_run_build_s"] = build_s
    ratios = {
        "long_run_bytes_per_turn_late_over_early": _per_turn(sizes, late) / _per_turn(sizes, early),
        "long_run_bytes_per_turn_over_bound": _per_turn(sizes, late) / (2 * content + 2048),
        "long_run_turn_time_late_over_early": _median_ms(built["turn_s"], t_late)
        / _median_ms(built["turn_s"], t_early),
    }
    curves = {"zincir": {int(k): v for k, v in sizes.items()}}
    turn_ms = {"zincir": [round(t * 1e3, 3) for t in built["turn_s"]]}
    notes["long_run"] = (
        f"{turns} turns of {content} B of new content each; bytes = main file + WAL after "
        f"wal_checkpoint(TRUNCATE); build took {build_s:.1f} s; resume median of {resumes}"
        + ("" if limit else "; the runtime's input limit lifted")
    )
    python = peers_python if peers_python and os.path.exists(peers_python) else None
    if python is None:
        notes["long_run_sqlitesaver"] = "skipped, the peers' venv is missing (make bench-peers)"
    else:
        started = time.perf_counter()
        peer = sqlitesaver_run(python, os.path.join(folder, "sqlitesaver.db"), turns, marks)
        peer_s = time.perf_counter() - started
        peer_sizes = peer["sizes"]
        for mark in FIXED_MARKS:
            if mark <= turns:
                figures[f"sqlitesaver_long_run_db_mb_{mark}"] = peer_sizes[str(mark)] / MB
        figures[f"sqlitesaver_long_run_bytes_per_turn_{late[0]}_{late[1]}"] = _per_turn(
            peer_sizes, late
        )
        figures[f"sqlitesaver_long_run_turn_ms_{t_late[0]}_{t_late[1]}"] = _median_ms(
            peer["turn_s"], t_late
        )
        figures["sqlitesaver_long_run_build_s"] = peer_s
        # SqliteSaver's grows with the square of the run: the target is for 1,000 turns.
        over = "long_run_sqlitesaver_over_zincir_bytes" + ("" if turns >= 1000 else f"_{turns}")
        ratios[over] = peer_sizes[str(turns)] / sizes[str(turns)]
        curves["sqlitesaver"] = {int(k): v for k, v in peer_sizes.items()}
        turn_ms["sqlitesaver"] = [round(t * 1e3, 3) for t in peer["turn_s"]]
    _remove(folder, "long-run.db", "sqlitesaver.db")
    return {
        "figures": figures,
        "ratios": ratios,
        "notes": notes,
        "curves": curves,
        "turn_ms": turn_ms,
    }


TARGETS = {
    "long_run_bytes_per_turn_late_over_early": ("<=", 1.1),
    "long_run_bytes_per_turn_over_bound": ("<=", 1.0),
    "long_run_turn_time_late_over_early": ("<=", 1.3),
    "long_run_sqlitesaver_over_zincir_bytes": (">=", 10.0),
}
FIGURE_TARGETS = {
    "long_run_db_mb_1000": ("<=", 10.0),
    "long_run_resume_1000_ms": ("<", 300.0),
}


# -- the report ---------------------------------------------------------------------------


def meets(value: float, target: tuple[str, float]) -> bool:
    """Whether ``value`` meets a target ``(op, bound)``; every report of figures asks this."""
    op, bound = target
    return {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[op]


def _verdict(value: float, target: tuple[str, float] | None) -> str:
    if target is None:
        return ""
    return f"{target[0]} {target[1]:g} {'met' if meets(value, target) else 'MISSED'}"


def plot(result: dict[str, Any], path: Path, before: dict[str, Any] | None = None) -> None:
    """Bytes against turns for each side (log scale: the sides differ by orders), and the
    median turn time of every ten turns beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (size_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    sides = [("zincir", result, "zincir", "tab:blue", "-")]
    if before is not None:
        sides.append(("zincir before", before, "zincir", "tab:blue", ":"))
    if "sqlitesaver" in result["curves"]:
        sides.append(("LangGraph SqliteSaver", result, "sqlitesaver", "tab:red", "-"))
    for label, source, side, colour, style in sides:
        points = sorted(
            (int(turn), size) for turn, size in source["curves"][side].items() if int(turn) > 0
        )
        size_axes.plot(
            [turn for turn, _ in points],
            [size / MB for _, size in points],
            style,
            color=colour,
            label=label,
            linewidth=2,
        )
        times = source.get("turn_ms", {}).get(side, [])
        buckets = range(0, len(times) - 9, 10)
        time_axes.plot(
            [start + 10 for start in buckets],
            [statistics.median(times[start : start + 10]) for start in buckets],
            style,
            color=colour,
            label=label,
            linewidth=2,
        )
    size_axes.set_yscale("log")
    size_axes.set_xlabel("turns (each adds about 2 KB)")
    size_axes.set_ylabel("database (MB, log scale)")
    size_axes.set_title("One agent run's database as it grows")
    time_axes.set_xlabel("turns")
    time_axes.set_ylabel("turn time (ms, median of ten)")
    time_axes.set_title("Time of a turn")
    for axes in (size_axes, time_axes):
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_doc(result: dict[str, Any], turns: int, before: dict[str, Any] | None) -> None:
    """Rewrite the long-run page (and the plot) from ``result``; ``before``, an earlier
    run's result, adds a column and a dotted curve."""
    earlier = {} if before is None else {**before["figures"], **before["ratios"]}
    head = "| figure | value |" + (" before |" if before else "") + " target |"
    rows = [head, "|---|---:|" + ("---:|" if before else "") + "---|"]
    for values, targets in ((result["figures"], FIGURE_TARGETS), (result["ratios"], TARGETS)):
        for name, value in values.items():
            was = f" {earlier[name]:,.2f} |" if name in earlier else " |"
            rows.append(
                f"| {name} | {value:,.2f} |{was if before else ''} "
                f"{_verdict(value, targets.get(name))} |"
            )
    machine = f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    text = [
        "# Long runs",
        "",
        "Written by `make bench` (benchmarks/long_run.py): one durable agent run of "
        f"{turns} turns (a `FunctionModel` agent with one tool through `Runner`, SQLite with "
        '`synchronous="normal"`, each turn about 2 KB of new text: a 2,048-character tool '
        "result and a short reply), and the same conversation on LangGraph's `SqliteSaver` "
        "(a messages graph, one super-step a turn). Database bytes are the main file after "
        "`wal_checkpoint(TRUNCATE)` (the WAL then empty); MB = 10^6 bytes. Bytes per turn "
        "are differences of those sizes; a turn's time runs from one model request to the "
        "next. Resume: a new process opening the store and continuing the unfinished run "
        "until the model is asked again, from the `Runner.resume` call (`_ms`) and from the "
        "process's start (`_process_ms`), median of the resumes.",
        "",
        *rows,
        "",
        f"Notes: {'; '.join(result['notes'].values())}. {machine}.",
        "",
    ]
    if before is not None:
        text += [
            "The before column and the dotted curves are the same benchmark on the store "
            "that kept each model request's whole input "
            f"({max(map(int, before['curves']['zincir']))} turns"
            + (
                f", {before['figures']['long_run_default_runner_turns']:.0f} on a default "
                "Runner, whose runtime's 1 MiB input limit was lifted past them"
                if "long_run_default_runner_turns" in before["figures"]
                else ""
            )
            + ").",
            "",
        ]
    text += ["![bytes and turn time against turns](long-run.png)", ""]
    DOC.write_text("\n".join(text))
    plot(result, PLOT, before)


def print_table(result: dict[str, Any]) -> None:
    print(f"{'figure':<44} {'value':>14}  target")
    for name, value in result["figures"].items():
        print(f"{name:<44} {value:>14.2f}  {_verdict(value, FIGURE_TARGETS.get(name))}")
    for name, value in result["ratios"].items():
        print(f"{name:<44} {value:>14.2f}  {_verdict(value, TARGETS.get(name))}")
    for name, note in result["notes"].items():
        print(f"note: {name}: {note}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--child", "build"]:
        marks = {int(mark) for mark in argv[4].split(",")}
        child_build(argv[2], int(argv[3]), marks, argv[5] == "limit")
        return
    if argv[:2] == ["--child", "resume"]:
        child_resume(argv[2], argv[3] == "limit")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="100 turns, 3 resumes")
    parser.add_argument("--resumes", type=int, default=5, help="resumes timed (median)")
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    parser.add_argument("--write", action="store_true", help="rewrite the long-run page and plot")
    parser.add_argument("--before", type=Path, help="an earlier run's --json, for the plot")
    parser.add_argument(
        "--from", dest="source", type=Path, help="report a run's --json instead of running"
    )
    parser.add_argument("--peers-python", default=str(HERE.parent / ".venv-peers/bin/python"))
    parser.add_argument(
        "--no-input-limit", action="store_true", help="lift the runtime's 1 MiB input limit at once"
    )
    args = parser.parse_args(argv)
    turns = 100 if args.quick else args.turns
    if args.source is not None:
        result = json.loads(args.source.read_text())
        turns = max(map(int, result["curves"]["zincir"]))
    else:
        with tempfile.TemporaryDirectory(prefix="zincir-long-run-") as folder:
            result = measure(
                turns,
                folder=folder,
                resumes=3 if args.quick else args.resumes,
                peers_python=args.peers_python,
                limit=not args.no_input_limit,
            )
    print_table(result)
    if args.json and args.source is None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.write:
        before = json.loads(args.before.read_text()) if args.before else None
        write_doc(result, turns, before)


if __name__ == "__main__":
    main()
