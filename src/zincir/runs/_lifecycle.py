"""Operator actions on runs from outside the process that runs them: cancelling a live run
(and its children), pruning old terminal runs, compacting a long run's log. Each checks its
input before anything is read or written."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from .._errors import InvalidInput
from .._validate import check_count, check_duration, check_id, shown, utf8
from ..store import TERMINAL_STATUSES, CompactReport, PruneReport, Store, as_store

__all__ = [
    "DEFAULT_BATCH_EVENTS",
    "MAX_REASON_CHARS",
    "cancel_run",
    "compact_run",
    "prune_runs",
]

MAX_REASON_CHARS: Final = 2000
DEFAULT_BATCH_EVENTS: Final = 2000
"""Events a prune deletes or a compaction moves per transaction: about 5-10 µs each on
SQLite, so other writers wait some 10-20 ms at most (a run holding more events is pruned
alone, in one longer transaction)."""


async def cancel_run(
    store: Store, run_id: str, *, reason: str | None = None, cascade: bool = False
) -> list[str]:
    """Cancel a live run: in one transaction it becomes ``cancelled`` (with a
    ``state_transition`` carrying ``reason``), its lease and wait are cleared, so the
    process running it gets RunCancelled at its next write and stops, and no ResumeWorker
    claims it again. ``cascade`` cancels every live descendant with it.

    Returns the ids cancelled; a run already cancelled is left as it is (its descendants are
    still cancelled with ``cascade``). RunNotFound for an unknown id, RunTerminal for a
    completed or failed run; nothing changes then.
    """
    as_store(store)
    check_id(run_id)
    if reason is not None and (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON_CHARS
        or "\x00" in reason
        or utf8(reason) is None
    ):
        raise InvalidInput(
            f"reason must be Unicode text without NUL, at most {MAX_REASON_CHARS} characters, "
            f"not {shown(reason)}",
            run_id=run_id,
        )
    if not isinstance(cascade, bool):
        raise InvalidInput(f"cascade must be True or False, not {shown(cascade)}", run_id=run_id)
    return await store.cancel_run(run_id, reason=reason, cascade=cascade)


async def prune_runs(
    store: Store,
    *,
    older_than: timedelta | float,
    statuses: Iterable[str] = ("completed", "failed", "cancelled"),
    batch_events: int = DEFAULT_BATCH_EVENTS,
) -> PruneReport:
    """Delete whole terminal runs last updated more than ``older_than`` ago, with every row
    they own (events, steps, timers, operations, checkpoints, approvals, their inbox).

    Live and paused runs are never touched, nor a run with a child left (a finished child
    goes first, then its parent). Each transaction deletes whole runs holding about
    ``batch_events`` events (a larger run alone), so writers of other runs wait only that
    long; a run is gone entirely or not at all.
    """
    as_store(store)
    age = check_duration(older_than, "older_than")
    if isinstance(statuses, str):
        statuses = statuses.split(",")
    chosen = sorted({str(status).strip() for status in statuses})
    if not chosen or not set(chosen) <= TERMINAL_STATUSES:
        raise InvalidInput(
            "statuses must name terminal statuses (completed, failed, cancelled); a live or "
            f"paused run is never pruned, got {shown(chosen)}"
        )
    check_count(batch_events, "batch_events")
    return await store.prune_runs(
        before=store.now() - age, statuses=chosen, max_events=batch_events
    )


async def compact_run(
    store: Store, run_id: str, *, batch_events: int = DEFAULT_BATCH_EVENTS
) -> CompactReport:
    """Move a run's events up to its latest accepted checkpoint's decision out of the live
    log into the archive, ``batch_events`` per transaction. Nothing a reader relies on
    changes: ``state()`` reads only what follows the checkpoint, the whole log still reads
    back in seq order (both parts merged), tool intents waiting for a result stay live, and
    a tool call id stays used. A run without an accepted checkpoint is left as it is."""
    as_store(store)
    check_id(run_id)
    check_count(batch_events, "batch_events", run_id=run_id)
    return await store.compact_run(run_id, max_events=batch_events)
