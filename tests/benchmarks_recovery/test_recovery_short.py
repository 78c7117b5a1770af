"""The recovery benchmark at short counts: real processes, real SIGKILLs, real SQLite files.

Two seeds, ten subtasks, two kills a run. Wherever zincir keeps the log, no external effect
is applied twice and no false claim of progress is accepted when checkpoints are verified;
the no-store and unverified controls show that the same measurements do see both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.recovery.harness import Cell, kill_schedule, run_once
from benchmarks.recovery.metrics import Summary, summarise
from benchmarks.recovery.world import Task

pytestmark = pytest.mark.crash

SEEDS = (0, 1)
KILLS = 2


def measure(cell: Cell, folder: Path) -> Summary:
    task = Task(subtasks=10, every=5, liar=cell.liar)
    crash_free = run_once(cell, task, [], folder / "crash-free")
    runs = [
        run_once(cell, task, kill_schedule(seed, task, KILLS), folder / f"seed{seed}")
        for seed in SEEDS
    ]
    return summarise(cell, crash_free, runs)


@pytest.mark.parametrize(
    "cell",
    [Cell("full", "fresh", "verify-liar"), Cell("normal", "replay", "verify")],
    ids=lambda cell: cell.label,
)
def test_zincir_never_repeats_an_effect_nor_accepts_false_progress(
    cell: Cell, tmp_path: Path
) -> None:
    summary = measure(cell, tmp_path)
    assert summary.kills == KILLS * len(SEEDS)
    assert summary.completed_correctly.worst == 1.0
    assert summary.duplicate_effects.worst == 0.0
    assert summary.false_progress_accepted.worst == 0.0
    assert summary.wasted_work_ratio.worst is not None
    assert summary.wasted_work_ratio.worst < 1.5


def test_without_a_store_a_restart_repeats_effects(tmp_path: Path) -> None:
    summary = measure(Cell("none", "fresh", "verify"), tmp_path)
    assert summary.completed_correctly.worst == 1.0
    assert summary.duplicate_effects.worst is not None and summary.duplicate_effects.worst > 0


def test_without_verification_the_liar_gets_false_progress_accepted(tmp_path: Path) -> None:
    summary = measure(Cell("full", "fresh", "none-liar"), tmp_path)
    assert summary.false_progress_accepted.worst is not None
    assert summary.false_progress_accepted.worst > 0
    assert summary.completed_correctly.mean == 0.0
