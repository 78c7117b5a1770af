"""The backend-neutral parts of operator actions on runs: a cancelled run's error text, how a
prune batches whole runs and walks its candidates, how compaction walks a log, and every
table that holds a run's rows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "RUN_TABLES",
    "CompactReport",
    "PruneReport",
    "cancelled_error_text",
    "compact_windows",
    "delete_whole_runs",
    "plan_batch",
    "prune_passes",
]

PageReader = Callable[[tuple[Any, str] | None], Awaitable[list[tuple[str, int, Any]]]]
"""Reads the next candidates (run id, last seq, updated_at) after a keyset position."""
BatchDeleter = Callable[[tuple[str, ...]], Awaitable[tuple[list[str], int]]]
"""Deletes the runs still prunable among the given ones in one transaction: (ids, events)."""

RUN_TABLES: Final = (
    ("events", "run_id"),
    ("archived_events", "run_id"),
    ("open_intents", "run_id"),
    ("checkpoints", "run_id"),
    ("step_claims", "run_id"),
    ("timers", "run_id"),
    ("operations", "run_id"),
    ("approvals", "run_id"),
    ("restart_checkpoints", "run_id"),
    ("messages", "to_run_id"),
    ("content_refs", "run_id"),
)
"""(table, column naming the run) of every row a run owns besides its ``agent_runs`` row.
Messages a pruned run sent to other runs stay in their recipients' inboxes."""


def cancelled_error_text(reason: str | None) -> str:
    """The ``last_error`` of a cancelled run."""
    return "cancelled" if reason is None else f"cancelled: {reason}"


@dataclass(slots=True)
class PruneReport:
    """What a prune deleted: whole runs, their events, in how many transactions, and the
    longest of those (how long other writers waited at most)."""

    run_ids: list[str] = field(default_factory=list)
    events: int = 0
    batches: int = 0
    longest_batch_ms: float = 0.0

    @property
    def runs(self) -> int:
        """How many runs were deleted."""
        return len(self.run_ids)

    def add(self, run_ids: Sequence[str], events: int, milliseconds: float) -> None:
        self.run_ids.extend(run_ids)
        self.events += events
        self.batches += 1
        self.longest_batch_ms = max(self.longest_batch_ms, milliseconds)


def plan_batch(candidates: Sequence[tuple[str, int]], max_events: int) -> tuple[str, ...]:
    """The first candidates (run id, last seq) whose events fit ``max_events``; a run
    larger than that on its own makes a batch of one (a run is deleted whole or not at all)."""
    chosen: list[str] = []
    total = 0
    for run_id, events in candidates:
        if chosen and total + events > max_events:
            break
        chosen.append(run_id)
        total += events
    return tuple(chosen)


def delete_whole_runs(
    execute: Callable[[str, tuple[object, ...]], Any],
    run_ids: Sequence[str],
    still_prunable: Callable[[str], tuple[str, tuple[object, ...]]],
    deletes: Sequence[str],
) -> tuple[list[str], int]:
    """In the caller's transaction, delete each run that ``still_prunable(run_id)`` (a query
    returning its last seq) still finds, running every statement of ``deletes`` with the run
    id (its own row last); return the ids deleted and their events."""
    deleted: list[str] = []
    events = 0
    for run_id in run_ids:
        query, params = still_prunable(run_id)
        row = execute(query, params).fetchone()
        if row is None:
            continue
        for statement in deletes:
            execute(statement, (run_id,))
        deleted.append(run_id)
        events += int(row[0])
    return deleted, events


async def prune_passes(read_page: PageReader, delete: BatchDeleter, max_events: int) -> PruneReport:
    """Walk the candidates in (updated_at, id) order, deleting them in batches of about
    ``max_events`` events; walk again while a pass deleted runs (a parent kept for its
    children may have lost them). Yields to the event loop between transactions."""
    report = PruneReport()
    while True:
        before_pass = report.runs
        after: tuple[Any, str] | None = None
        while page := await read_page(after):
            after = (page[-1][2], page[-1][0])
            candidates = [(run_id, last_seq) for run_id, last_seq, _ in page]
            while candidates:
                batch = plan_batch(candidates, max_events)
                candidates = candidates[len(batch) :]
                started = time.perf_counter()
                deleted, events = await delete(batch)
                if deleted:
                    report.add(deleted, events, (time.perf_counter() - started) * 1000)
                await asyncio.sleep(0)
        if report.runs == before_pass:
            return report


@dataclass(slots=True)
class CompactReport:
    """What compacting a run moved: its events up to ``through_seq`` (the latest accepted
    checkpoint's decision) went to the archive, but for ``kept`` open intents."""

    run_id: str
    through_seq: int = 0
    archived: int = 0
    kept: int = 0
    batches: int = 0
    longest_batch_ms: float = 0.0


Mover = Callable[[int, int], Awaitable[int]]
"""Archives the run's movable events with low < seq <= high in one transaction: how many."""


async def compact_windows(
    report: CompactReport, first_live: int, move: Mover, max_events: int
) -> CompactReport:
    """Move the events from ``first_live`` through ``report.through_seq`` in seq windows of
    ``max_events``, a transaction each, yielding to the event loop between them."""
    low = first_live - 1
    while low < report.through_seq:
        high = min(low + max_events, report.through_seq)
        started = time.perf_counter()
        moved = await move(low, high)
        if moved:
            report.archived += moved
            report.batches += 1
            elapsed = (time.perf_counter() - started) * 1000
            report.longest_batch_ms = max(report.longest_batch_ms, elapsed)
        low = high
        await asyncio.sleep(0)
    return report
