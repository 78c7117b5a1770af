"""Runs one cell of the benchmark: a task, killed at seeded points, restarted until done.

A run is a sequence of real processes on the same files (store, ledger, meter, artifacts).
Process ``j`` is armed to SIGKILL itself at the ``j``-th point of the seed's kill schedule;
once the schedule is spent, the next process runs to the end. What the processes did is
then read from the world, which no system under test writes into by itself: the ledger
(effects, calls), the meter (model requests and their tokens, checkpoint audits) and the
artifacts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .world import KILL_ENV, PHASES, Artifacts, Ledger, Task, read_meter

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
_MAX_PROCESSES = 30


@dataclass(frozen=True)
class Cell:
    """One combination of the varied dimensions (``system`` is zincir or a peer)."""

    durability: str  # none | normal | full
    context: str  # replay | fresh
    verification: str  # none | verify | verify-liar | none-liar
    system: str = "zincir"

    @property
    def verify(self) -> bool:
        return self.verification.startswith("verify")

    @property
    def liar(self) -> bool:
        return self.verification.endswith("liar")

    @property
    def label(self) -> str:
        return f"{self.system}/{self.durability}/{self.context}/{self.verification}"


def kill_schedule(seed: int, task: Task, kills: int) -> list[str]:
    """``kills`` kill points ``subtask:phase`` on distinct subtasks, in the order the task
    reaches them. A fifth of them, on average, fall where a checkpoint's verifier decided
    (``verified``, at the last subtask of a round)."""
    rng = random.Random(seed)
    points: dict[int, str] = {}
    while len(points) < min(kills, task.subtasks - 1):
        subtask = rng.randrange(1, task.subtasks)
        phase = rng.choice([*PHASES, "verified"])
        if phase == "verified":  # the end of the subtask's checkpoint round
            subtask = min(task.subtasks, subtask - subtask % task.every + task.every) - 1
        points.setdefault(subtask, phase)
    return [f"{subtask}:{phase}" for subtask, phase in sorted(points.items())]


@dataclass
class Outcome:
    """What one run (one cell, one seed) did, read from the world afterwards."""

    kills: int = 0
    processes: int = 0
    completed_correctly: bool = False
    duplicate_effects: int = 0
    model_requests: int = 0
    tool_calls: int = 0
    tokens: int = 0
    context_tokens_end: int = 0
    false_progress_accepted: int = 0
    restart_to_progress_ms: list[float] = field(default_factory=list)
    ready_to_progress_ms: list[float] = field(default_factory=list)
    context_curve: list[int] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _command(cell: Cell, config: dict[str, Any]) -> list[str]:
    if cell.system == "zincir":
        return [str(ROOT / ".venv" / "bin" / "python"), "-m", "benchmarks.recovery.agent"]
    return [str(PEERS_PYTHON), "-m", "benchmarks.recovery.peers", cell.system]


def run_once(cell: Cell, task: Task, schedule: list[str], folder: Path) -> Outcome:
    """Run the task in ``folder`` (emptied first) with kills at ``schedule``; its outcome."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = {
        **task.to_json(),
        "durability": cell.durability,
        "context": cell.context,
        "verify": cell.verify,
        "db": str(folder / "store.db"),
        "ledger": str(folder / "ledger.db"),
        "meter": str(folder / "meter.jsonl"),
        "artifacts": str(folder / "artifacts"),
    }
    Ledger(config["ledger"]).close()  # the ledger exists before any agent runs
    outcome = Outcome()
    spawned: list[tuple[float, int]] = []  # (start, pid) of every restart
    started = time.monotonic()
    finished = False
    while outcome.processes < _MAX_PROCESSES:
        env = dict(os.environ)
        env[KILL_ENV] = schedule[outcome.kills] if outcome.kills < len(schedule) else ""
        spawn_at = time.monotonic()
        process = subprocess.Popen(
            [*_command(cell, config), json.dumps(config)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, stderr = process.communicate(timeout=300)
        outcome.processes += 1
        if outcome.processes > 1:
            spawned.append((spawn_at, process.pid))
        if process.returncode == -signal.SIGKILL:
            outcome.kills += 1
            continue
        if process.returncode != 0:
            raise RuntimeError(
                f"{cell.label}: process {outcome.processes} exited {process.returncode}:\n"
                + stderr.decode(errors="replace")[-3000:]
            )
        finished = True
        break
    outcome.wall_s = time.monotonic() - started
    _read_world(outcome, task, config, spawned, finished)
    return outcome


def _read_world(
    outcome: Outcome,
    task: Task,
    config: dict[str, Any],
    spawned: list[tuple[float, int]],
    finished: bool,
) -> None:
    ledger = Ledger(config["ledger"])
    try:
        effects, calls = ledger.effects(), ledger.calls()
    finally:
        ledger.close()
    meter = read_meter(config["meter"])
    requests = [line for line in meter if line["kind"] == "request"]
    outcome.model_requests = len(requests)
    outcome.tool_calls = len(calls)
    outcome.tokens = sum(line["tokens"] for line in requests)
    outcome.context_curve = [line["context_tokens"] for line in requests]
    outcome.context_tokens_end = outcome.context_curve[-1] if requests else 0
    outcome.duplicate_effects = len(effects) - len({subtask for _, subtask, *_ in effects})
    false: set[int] = set()
    for line in meter:
        if line["kind"] == "audit" and line["accepted"]:
            false.update(line["false"])
    outcome.false_progress_accepted = len(false)
    artifacts = Artifacts(config["artifacts"])
    values: dict[int, set[str]] = {}
    for _, subtask, value, _, _ in effects:
        values.setdefault(subtask, set()).add(value)
    correct = finished and any(line["kind"] == "final" for line in meter)
    for subtask in range(task.subtasks):
        found = artifacts.read(subtask)
        if found is None or found.get("effect") not in values.get(subtask, set()):
            correct = False
    outcome.completed_correctly = correct
    for spawn_at, pid in spawned:
        seen = {subtask for _, subtask, _, at, _ in effects if at < spawn_at}
        first_new = next(
            (at for _, subtask, _, at, p in effects if p == pid and subtask not in seen), None
        )
        if first_new is None:
            continue
        outcome.restart_to_progress_ms.append((first_new - spawn_at) * 1000)
        ready = next(
            (line["at"] for line in meter if line["kind"] == "ready" and line["pid"] == pid), None
        )
        if ready is not None:
            outcome.ready_to_progress_ms.append((first_new - ready) * 1000)
