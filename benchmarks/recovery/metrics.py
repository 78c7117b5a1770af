"""Per-cell figures, mean and worst over seeds, from the runs' outcomes and the crash-free run."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .harness import Cell, Outcome

__all__ = ["Summary", "summarise"]


@dataclass(frozen=True)
class Figure:
    """A figure's mean over seeds and its worst seed (None when no seed measured it)."""

    mean: float | None
    worst: float | None

    @classmethod
    def of(cls, values: list[float], *, worst_is_high: bool = True) -> Figure:
        if not values:
            return cls(None, None)
        worst = max(values) if worst_is_high else min(values)
        return cls(statistics.fmean(values), worst)


@dataclass(frozen=True)
class Summary:
    """Every figure of one cell."""

    cell: Cell
    seeds: int
    kills: int
    completed_correctly: Figure
    duplicate_effects: Figure
    repeated_requests_per_kill: Figure
    repeated_tool_calls_per_kill: Figure
    wasted_work_ratio: Figure
    restart_to_progress_ms: Figure
    ready_to_progress_ms: Figure
    context_tokens_end: Figure
    false_progress_accepted: Figure
    crash_free_tokens: int
    crash_free_requests: int
    crash_free_wall_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarise(cell: Cell, crash_free: Outcome, runs: list[Outcome]) -> Summary:
    """The cell's figures: each seed's run against the cell's crash-free run."""
    killed = [run for run in runs if run.kills]
    restarts = [ms for run in runs for ms in run.restart_to_progress_ms]  # every restart
    return Summary(
        cell=cell,
        seeds=len(runs),
        kills=sum(run.kills for run in runs),
        completed_correctly=Figure.of(
            [float(run.completed_correctly) for run in runs], worst_is_high=False
        ),
        duplicate_effects=Figure.of([float(run.duplicate_effects) for run in runs]),
        repeated_requests_per_kill=Figure.of(
            [(run.model_requests - crash_free.model_requests) / run.kills for run in killed]
        ),
        repeated_tool_calls_per_kill=Figure.of(
            [(run.tool_calls - crash_free.tool_calls) / run.kills for run in killed]
        ),
        wasted_work_ratio=Figure.of([run.tokens / crash_free.tokens for run in runs]),
        restart_to_progress_ms=Figure.of(restarts),
        ready_to_progress_ms=Figure.of([ms for run in runs for ms in run.ready_to_progress_ms]),
        context_tokens_end=Figure.of([float(run.context_tokens_end) for run in runs]),
        false_progress_accepted=Figure.of([float(run.false_progress_accepted) for run in runs]),
        crash_free_tokens=crash_free.tokens,
        crash_free_requests=crash_free.model_requests,
        crash_free_wall_s=crash_free.wall_s,
    )
