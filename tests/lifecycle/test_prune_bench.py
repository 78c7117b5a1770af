"""The retention benchmark at quick sizes: it measures what it says, on a real file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchmarks import prune_bench


class _QuickBench:
    quick = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def db(self, label: str) -> str:
        return str(self.folder / f"{label}.db")

    def n(self, full: int, quick: int) -> int:
        return quick


def test_the_prune_benchmark_reports_its_figures(tmp_path: Path) -> None:
    def run_async(coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    figures = prune_bench.measure(_QuickBench(tmp_path), run_async)
    # A turn logs about 0.8 KB of JSON; indexes and pages add to it, but not tenfold.
    assert 300 < figures["prune_kb_per_1000_turn_run"] < 8000
    assert figures["prune_events_per_s"] > 0
    assert 0 < figures["prune_longest_batch_ms"] < 1000
    assert figures["prune_writer_during_max_ms"] >= figures["prune_writer_during_p50_ms"] > 0


def test_the_compaction_benchmark_reports_its_figures(tmp_path: Path) -> None:
    from benchmarks.run import resume_figures

    def run_async(coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    figures = prune_bench.measure_compaction(_QuickBench(tmp_path), run_async, resume_figures)
    assert figures["compact_archived"] == 90_000  # all but the 10,000 after the checkpoint
    assert figures["resume_100k_before_compact_ms"] > 0
    assert figures["resume_100k_after_compact_ms"] > 0
    assert 0 < figures["compact_longest_batch_ms"] < 5000
