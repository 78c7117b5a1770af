"""Operator actions on runs from outside their owner, written once: cancellation, which
fences the owner in the same transaction; an operator's event (a budget, a spin
acknowledgement) that unparks the run waiting for it; pruning of old terminal runs and
compaction of a long log, both in transactions of bounded size."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Final

from .._time import to_db
from ._content import SWEEP_RUN_CONTENT, ContentIndex
from ._log import append_checked
from ._records import LIVE_STATUSES, NewEvent
from ._run_rules import (
    cancel_refused,
    cancelled_transition,
    operator_event_topic,
    operator_refused,
    run_not_found,
)
from ._sql import Rules, Sql, Tx, sql
from ._streams import drop_stream_deltas, end_stream

__all__ = [
    "RUN_TABLES",
    "CompactReport",
    "LifecycleOps",
    "PruneReport",
    "cancel_run",
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
    ("stream_items", "run_id"),
    ("run_traces", "run_id"),
    ("run_origins", "run_id"),
)
"""(table, column naming the run) of every row a run owns besides its ``agent_runs`` row.
Messages a pruned run sent to other runs stay in their recipients' inboxes."""

_LIVE: Final = "status IN ('pending', 'running')"
_STATUS: Final = sql("SELECT status FROM agent_runs WHERE id = ?{for_no_key_update}")
_DESCENDANTS: Final = sql(
    "WITH RECURSIVE tree (id) AS ("
    " SELECT id FROM agent_runs WHERE parent_id = ?"
    " UNION SELECT child.id FROM agent_runs AS child JOIN tree ON child.parent_id = tree.id)"
    " SELECT run.id, run.status FROM agent_runs AS run JOIN tree ON run.id = tree.id"
    f" WHERE run.{_LIVE} ORDER BY run.id"
)
_CANCEL: Final = sql(
    "UPDATE agent_runs SET status = 'cancelled', last_seq = {last_seq} + 1, "
    "lease_owner = NULL, lease_expires_at = NULL, wait_kind = NULL, wait_ref = NULL, "
    "wait_until = NULL, next_attempt_at = NULL, last_error = ?, updated_at = zincir_now() "
    f"WHERE id = ? AND {_LIVE} RETURNING last_seq",
    seals=(0,),
    run_param=1,
)
_WAITING: Final = sql(
    "SELECT status, wait_kind, wait_ref FROM agent_runs WHERE id = ?{for_no_key_update}"
)
_BUMPED: Final = (
    "UPDATE agent_runs SET last_seq = {last_seq} + 1, updated_at = zincir_now(), "
    "lease_expires_at = {lease_expiry}, budget = COALESCE(?, budget)"
)
_BUMP: Final = sql(f"{_BUMPED} WHERE id = ? AND {_LIVE} RETURNING last_seq")
_UNPARK: Final = sql(
    f"{_BUMPED}, wait_kind = NULL, wait_ref = NULL, wait_until = NULL "
    f"WHERE id = ? AND {_LIVE} RETURNING last_seq"
)
_CANDIDATES: Final = (
    "SELECT id, {last_seq}, updated_at FROM agent_runs WHERE status {in_list} AND updated_at < ?"
)
_ORDER: Final = " ORDER BY updated_at, id{bytewise} LIMIT ?"
_FIRST_PAGE: Final = sql(_CANDIDATES + _ORDER)
_NEXT_PAGE: Final = sql(_CANDIDATES + " AND (updated_at, id{bytewise}) > (?, ?)" + _ORDER)
_STILL_PRUNABLE: Final = sql(
    "SELECT {last_seq:run} FROM agent_runs AS run WHERE id = ? AND status {in_list} "
    "AND updated_at < ? AND NOT EXISTS "
    "(SELECT 1 FROM agent_runs AS child WHERE child.parent_id = run.id){for_update}"
)
_HOLD_REFERENCES: Final = sql("{hold_references}")
"""No reference is added while the sweep judges which pieces only the pruned runs refer to
(a writer adds its references before its pieces); SQLite runs one writer."""
_DELETES: Final = (
    sql(SWEEP_RUN_CONTENT.format(param="?")),  # the content only this run refers to
    *(sql(f"DELETE FROM {table} WHERE {column} = ?") for table, column in RUN_TABLES),
    sql("DELETE FROM agent_runs WHERE id = ?"),
)
_PAGE: Final = 1000  # candidates read per snapshot
_RUN_EXISTS: Final = sql("SELECT 1 FROM agent_runs WHERE id = ?")
_LATEST_ACCEPTED: Final = sql(
    "SELECT decided_seq FROM checkpoints WHERE run_id = ? AND status = 'accepted' "
    "ORDER BY round DESC LIMIT 1"
)
_FIRST_LIVE: Final = sql("SELECT MIN(seq) FROM events WHERE run_id = ?")
_OPEN_BEFORE: Final = sql("SELECT COUNT(*) FROM open_intents WHERE run_id = ? AND seq <= ?")
_MOVABLE: Final = (
    "WHERE e.run_id = ? AND e.seq > ? AND e.seq <= ? AND "
    "NOT EXISTS (SELECT 1 FROM open_intents AS o WHERE o.run_id = e.run_id AND o.seq = e.seq)"
)
_SETTLE_ROW: Final = sql(
    "UPDATE agent_runs SET {caught_up}, updated_at = {updated_at} WHERE id = ?"
)
_ARCHIVE: Final = sql(
    "INSERT INTO archived_events (run_id, seq, type, payload, created_at, tool_call_id, "
    "payload_pieces) "
    "SELECT e.run_id, e.seq, e.type, e.payload, e.created_at, e.tool_call_id, e.payload_pieces "
    f"FROM events AS e {_MOVABLE}"
)
_UNLOG: Final = sql(f"DELETE FROM events AS e {_MOVABLE} RETURNING 1")


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
    tx: Tx, run_ids: Sequence[str], still_prunable: Sql, params: Sequence[object]
) -> tuple[list[str], int]:
    """In the caller's transaction, delete each run that ``still_prunable`` (a query of the
    run id then ``params``, returning its last seq) still finds, with every row it owns (its
    own row last); return the ids deleted and their events."""
    tx.execute(_HOLD_REFERENCES)
    deleted: list[str] = []
    events = 0
    for run_id in run_ids:
        row = tx.one(still_prunable, (run_id, *params))
        if row is None:
            continue
        for statement in _DELETES:
            tx.execute(statement, (run_id,))
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
    checkpoint's decision) went to the archive, but for ``kept`` open intents; and the
    ``stream_deltas`` dropped from its stream (those of model requests with a message)."""

    run_id: str
    through_seq: int = 0
    archived: int = 0
    kept: int = 0
    batches: int = 0
    longest_batch_ms: float = 0.0
    stream_deltas: int = 0


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


def cancel_run(tx: Tx, run_id: str, reason: str | None, cascade: bool) -> list[str]:
    """Cancel ``run_id`` (and, with ``cascade``, each live descendant): ``cancelled`` with its
    transition, lease and wait gone, and a streamed run's stream ended by a ``result`` item
    ``{status: "cancelled", reason?}``; the ids cancelled. Refused for a missing or finished
    run, with nothing changed."""
    row = tx.one(_STATUS, (run_id,))
    status = None if row is None else str(row[0])
    refused = cancel_refused(run_id, status)
    if refused is not None:
        raise refused
    targets: list[tuple[str, str, str | None]] = []
    if status in LIVE_STATUSES:
        targets.append((run_id, str(status), None))
    if cascade:
        found = tx.all(_DESCENDANTS, (run_id,))
        targets += [(str(child), str(old), run_id) for child, old in found]
    error = cancelled_error_text(reason)
    final: dict[str, object] = {"status": "cancelled"}
    if reason is not None:
        final["reason"] = reason
    items: list[tuple[str, int, Sequence[NewEvent]]] = []
    for target, old, by in targets:
        cancelled = tx.one(_CANCEL, (error, target))
        assert cancelled is not None, "a live run's row, locked or alone with the writer"
        items.append((target, int(cancelled[0]) - 1, [cancelled_transition(old, reason, by)]))
        end_stream(tx, target, final)  # a streamed run's stream ends with its result
    append_checked(tx, items)
    return [target for target, _, _ in targets]


def append_operator_event(tx: Tx, run_id: str, kind: str, payload_json: str, topic: str) -> int:
    """Append an operator's event to a live run, unparking it if it waits for that event
    (on ``topic``); the event's seq."""
    row = tx.one(_WAITING, (run_id,))
    refused = operator_refused(run_id, None if row is None else str(row[0]))
    if refused is not None:
        raise refused
    assert row is not None  # operator_refused names a missing run
    parked = (row[1], row[2]) == ("message", topic)
    budget = payload_json if kind == "budget_set" else None
    bumped = tx.one(_UNPARK if parked else _BUMP, (budget, run_id))
    assert bumped is not None, "a live run's row, locked or alone with the writer"
    last_seq = int(bumped[0])
    append_checked(tx, [(run_id, last_seq - 1, [NewEvent(kind, payload_json)])])
    return last_seq


def _compact_bounds(tx: Tx, run_id: str) -> tuple[int | None, int, int]:
    """(the latest accepted checkpoint's decision or None, the first live seq, the open
    intents at or before the decision)."""
    if tx.one(_RUN_EXISTS, (run_id,)) is None:
        raise run_not_found(run_id)
    decided = tx.one(_LATEST_ACCEPTED, (run_id,))
    if decided is None:
        return None, 0, 0
    through = int(decided[0])
    first = tx.one(_FIRST_LIVE, (run_id,))
    kept = tx.one(_OPEN_BEFORE, (run_id, through))
    assert first is not None and kept is not None, "aggregates return a row"
    return through, int(first[0] or through + 1), int(kept[0])


def _archive(tx: Tx, run_id: str, low: int, high: int) -> int:
    """Move the run's movable events with low < seq <= high to the archive: how many."""
    # The run's row first takes what the live log says of it (SQLite reads that from the
    # newest events, which may be the ones moved).
    tx.execute(_SETTLE_ROW, (run_id,))
    tx.execute(_ARCHIVE, (run_id, low, high))
    return len(tx.all(_UNLOG, (run_id, low, high)))


class LifecycleOps(Rules):
    """Cancelling live runs, operators' events, pruning terminal runs, compacting logs."""

    _content: ContentIndex  # the store's content cache

    async def cancel_run(
        self, run_id: str, *, reason: str | None = None, cascade: bool = False
    ) -> list[str]:
        """Cancel run ``run_id`` and, with ``cascade``, each live descendant, in one
        transaction: each becomes ``cancelled`` with its state_transition and loses its
        lease and wait, so its owner's next write raises RunCancelled and no worker claims
        it; a run whose stream has items gets its ``result`` item (``cancelled``), which
        ends the stream's readers. Returns the ids cancelled (not the run itself when it
        already was).

        RunNotFound, or RunTerminal for a completed or failed run, with nothing changed.
        """
        return await self._write_tx(lambda tx: cancel_run(tx, run_id, reason, cascade))

    async def prune_runs(
        self, *, before: datetime, statuses: Collection[str], max_events: int
    ) -> PruneReport:
        """Delete every run of ``statuses`` (terminal ones) last updated before ``before``,
        with all its rows, a whole run per transaction at most: transactions hold about
        ``max_events`` events each (a larger run alone), so other writers wait briefly. A
        run with a child left is kept (its children go first)."""
        chosen = sorted(set(statuses))
        to_db(before)  # InvalidInput for a naive datetime, before any read

        def page(tx: Tx, after: tuple[Any, str] | None) -> list[tuple[str, int, Any]]:
            head = (tx.values(chosen), tx.stamp(before))
            if after is None:
                rows = tx.all(_FIRST_PAGE, (*head, _PAGE))
            else:
                rows = tx.all(_NEXT_PAGE, (*head, *after, _PAGE))
            return [(str(run_id), int(last_seq), at) for run_id, last_seq, at in rows]

        def delete(tx: Tx, run_ids: tuple[str, ...]) -> tuple[list[str], int]:
            params = (tx.values(chosen), tx.stamp(before))
            return delete_whole_runs(tx, run_ids, _STILL_PRUNABLE, params)

        async def read_page(after: tuple[Any, str] | None) -> list[tuple[str, int, Any]]:
            return await self._read_tx(partial(page, after=after), offload=True)

        async def delete_batch(run_ids: tuple[str, ...]) -> tuple[list[str], int]:
            return await self._write_tx(partial(delete, run_ids=run_ids))

        report = await prune_passes(read_page, delete_batch, max_events)
        self._content.forget(report.run_ids)
        return report

    async def append_operator_event(self, run_id: str, kind: str, payload_json: str) -> int:
        """Append an operator's event (``budget_set``, ``spin_acknowledged``) to a live
        run's log from outside its owner, and unpark the run if it waits for that event;
        return the event's seq. RunNotFound, or RunTerminal for a finished run, with nothing
        changed."""
        topic = operator_event_topic(kind, run_id)
        return await self._write_tx(
            lambda tx: append_operator_event(tx, run_id, kind, payload_json, topic)
        )

    async def compact_run(self, run_id: str, *, max_events: int) -> CompactReport:
        """Move the run's events up to its latest accepted checkpoint's decision into the
        archive, in transactions of at most ``max_events`` events; tool intents still waiting
        for their result stay. The log read whole is unchanged (both parts merged by seq),
        and so is ``state()``, which reads only what follows the checkpoint. The run's
        stream loses the deltas of model requests whose message it holds. RunNotFound for
        an unknown run; a run without an accepted checkpoint keeps its log as it is."""
        through, first_live, kept = await self._read_tx(lambda tx: _compact_bounds(tx, run_id))
        report = CompactReport(run_id, through or 0, kept=kept)
        report.stream_deltas = await drop_stream_deltas(self, run_id, max_events)
        if through is None:
            return report

        async def move_window(low: int, high: int) -> int:
            return await self._write_tx(lambda tx: _archive(tx, run_id, low, high))

        return await compact_windows(report, first_live, move_window, max_events)
