"""The long-horizon recovery benchmark: how much work a crash costs.

    python -m benchmarks.recovery.run [--subtasks N] [--every K] [--kills M] [--seeds S]
                                      [--no-peers] [--write PATH] [--json PATH]

Every cell (durability × context × verification, and the peers beside zincir) runs once
without kills and once per seed with ``M`` seeded SIGKILLs, each followed by a restart; the
report (tables, plots) goes to ``--write`` (default docs/operations/performance/recovery.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

from .harness import PEERS_PYTHON, ROOT, Cell, Outcome, kill_schedule, run_once
from .metrics import Summary, summarise
from .report import write_report
from .world import Task

DURABILITY = ("none", "normal", "full")
CONTEXT = ("replay", "fresh")
VERIFICATION = ("none", "verify", "verify-liar", "none-liar")


CURVE_LABELS = {"replay": "replay: the whole log", "fresh": "fresh: ctx.state()"}
PEERS = ("langgraph", "dbos")
IMPORTS = {
    "zincir": "zincir",
    "langgraph": "langgraph.graph, langgraph.checkpoint.sqlite",
    "dbos": "dbos",
}


def cells(peers: bool) -> list[Cell]:
    """Every zincir cell, then the peers' (their own SQLite durability, verification on)."""
    grid = [Cell(d, c, v) for d, c, v in product(DURABILITY, CONTEXT, VERIFICATION)]
    if peers:
        grid += [Cell("full", c, "verify", system) for system in PEERS for c in CONTEXT]
    return grid


def import_ms(system: str) -> float:
    """How long a fresh interpreter takes to import ``system`` (part of every restart)."""
    python = ROOT / ".venv" / "bin" / "python" if system == "zincir" else PEERS_PYTHON
    code = (
        "import time; started = time.perf_counter(); "
        f"import {IMPORTS[system]}; print(time.perf_counter() - started)"
    )
    output = subprocess.run([str(python), "-c", code], capture_output=True, check=True, text=True)
    return float(output.stdout) * 1000


def peers_available() -> bool:
    """Whether the peers' virtualenv exists (``make bench-peers`` creates it)."""
    return PEERS_PYTHON.exists()


def measure(
    grid: list[Cell], task: Task, kills: int, seeds: int, scratch: Path, verbose: bool = True
) -> tuple[list[Summary], dict[str, Outcome]]:
    """Run every cell: its crash-free run, then one killed run per seed."""
    summaries: list[Summary] = []
    curves: dict[str, Outcome] = {}
    for cell in grid:
        cell_task = Task(task.subtasks, task.every, cell.liar)
        started = time.monotonic()
        crash_free = run_once(cell, cell_task, [], scratch / "crash-free")
        runs = [
            run_once(cell, cell_task, kill_schedule(seed, cell_task, kills), scratch / "run")
            for seed in range(seeds)
        ]
        summary = summarise(cell, crash_free, runs)
        summaries.append(summary)
        if cell.system == "zincir" and cell.verification == "verify" and cell.durability == "full":
            curves[CURVE_LABELS[cell.context]] = crash_free
        if verbose:
            print(
                f"{cell.label:42} {time.monotonic() - started:6.1f} s  "
                f"correct {summary.completed_correctly.mean:.2f}  "
                f"dup {summary.duplicate_effects.mean:.1f}  "
                f"waste {summary.wasted_work_ratio.mean:.3f}  "
                f"false {summary.false_progress_accepted.mean:.1f}",
                flush=True,
            )
    return summaries, curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subtasks", type=int, default=40)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument(
        "--write", type=Path, default=ROOT / "docs" / "operations" / "performance" / "recovery.md"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    task = Task(args.subtasks, args.every)
    notes = []
    peers = not args.no_peers and peers_available()
    if not args.no_peers and not peers:
        notes.append("The peers' virtualenv (.venv-peers) is missing: peers not measured.")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zincir-recovery-") as scratch:
        summaries, curves = measure(cells(peers), task, args.kills, args.seeds, Path(scratch))
    elapsed = time.monotonic() - started
    notes.append(f"The whole grid took {elapsed:.0f} s on this machine.")
    systems = ("zincir", *PEERS) if peers else ("zincir",)
    imports = ", ".join(f"{system} {import_ms(system):.0f} ms" for system in systems)
    notes.append(
        "Importing each system in a fresh interpreter (part of every restart) took: "
        + imports
        + "."
    )
    settings = {
        "subtasks": task.subtasks,
        "every": task.every,
        "kills": args.kills,
        "seeds": args.seeds,
    }
    figures = write_report(args.write, summaries, curves, settings, notes)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "settings": settings,
                    "headline": figures,
                    "cells": [s.to_json() for s in summaries],
                },
                indent=2,
            )
        )
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
