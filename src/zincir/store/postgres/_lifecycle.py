"""Operator actions on runs from outside their owner (PostgreSQL): cancellation, which fences
the owner in the same transaction; an operator's event (a budget, a spin acknowledgement)
that unparks the run waiting for it; pruning of old terminal runs and compaction of a long
log, both in transactions of bounded size."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from functools import partial
from typing import Any, Final

from ..._time import to_db
from .._lifecycle import (
    RUN_TABLES,
    CompactReport,
    PruneReport,
    cancelled_error_text,
    compact_windows,
    delete_whole_runs,
    prune_passes,
)
from .._records import LIVE_STATUSES, NewEvent
from .._run_rules import (
    cancel_refused,
    cancelled_transition,
    operator_event_topic,
    operator_refused,
    run_not_found,
)
from ._base import Conn, PostgresBase, one
from ._content import SWEEP
from ._log import append_checked

__all__ = ["LifecycleOps"]

_LIVE: Final = "status IN ('pending', 'running')"
_DESCENDANTS: Final = (
    "WITH RECURSIVE tree (id) AS ("
    " SELECT id FROM agent_runs WHERE parent_id = %s"
    " UNION SELECT child.id FROM agent_runs AS child JOIN tree ON child.parent_id = tree.id)"
    " SELECT run.id, run.status FROM agent_runs AS run JOIN tree ON run.id = tree.id"
    f" WHERE run.{_LIVE} ORDER BY run.id"
)
_CANCEL: Final = (
    "UPDATE agent_runs SET status = 'cancelled', last_seq = last_seq + 1, lease_owner = NULL, "
    "lease_expires_at = NULL, wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    "next_attempt_at = NULL, last_error = %s, updated_at = zincir_now() "
    f"WHERE id = %s AND {_LIVE} RETURNING last_seq"
)
_BUMP: Final = (
    "UPDATE agent_runs SET last_seq = last_seq + 1, updated_at = zincir_now(), "
    f"budget = COALESCE(%s, budget) WHERE id = %s AND {_LIVE} RETURNING last_seq"
)
_UNPARK: Final = (
    "UPDATE agent_runs SET last_seq = last_seq + 1, updated_at = zincir_now(), wait_kind = NULL, "
    "wait_ref = NULL, wait_until = NULL, budget = COALESCE(%s, budget) "
    f"WHERE id = %s AND {_LIVE} RETURNING last_seq"
)
_RUN_EXISTS: Final = "SELECT 1 FROM agent_runs WHERE id = %s"
_LATEST_ACCEPTED: Final = (
    "SELECT decided_seq FROM checkpoints WHERE run_id = %s AND status = 'accepted' "
    "ORDER BY round DESC LIMIT 1"
)
_FIRST_LIVE: Final = "SELECT MIN(seq) FROM events WHERE run_id = %s"
_OPEN_BEFORE: Final = "SELECT COUNT(*) FROM open_intents WHERE run_id = %s AND seq <= %s"
_MOVABLE: Final = (
    "WHERE e.run_id = %s AND e.seq > %s AND e.seq <= %s AND "
    "NOT EXISTS (SELECT 1 FROM open_intents AS o WHERE o.run_id = e.run_id AND o.seq = e.seq)"
)
_ARCHIVE: Final = (
    "INSERT INTO archived_events (run_id, seq, type, payload, created_at, tool_call_id, "
    "payload_pieces) "
    "SELECT e.run_id, e.seq, e.type, e.payload, e.created_at, e.tool_call_id, e.payload_pieces "
    "FROM events AS e "
    f"{_MOVABLE}"
)
_UNLOG: Final = f"DELETE FROM events AS e {_MOVABLE}"
_PAGE: Final = 1000  # candidates read per snapshot
_HOLD_REFERENCES: Final = "LOCK TABLE content_refs IN SHARE MODE"
_DELETES: Final = (
    SWEEP,  # the content only this run refers to, before its references go
    *(f"DELETE FROM {table} WHERE {column} = %s" for table, column in RUN_TABLES),
    "DELETE FROM agent_runs WHERE id = %s",
)
_STILL_PRUNABLE: Final = (
    "SELECT last_seq FROM agent_runs AS run WHERE id = %s AND status = ANY(%s) "
    "AND updated_at < %s AND NOT EXISTS "
    "(SELECT 1 FROM agent_runs AS child WHERE child.parent_id = run.id) FOR UPDATE"
)
_FIRST: Final = (
    "SELECT id, last_seq, updated_at FROM agent_runs WHERE status = ANY(%s) AND updated_at < %s"
)
_ORDER: Final = ' ORDER BY updated_at, id COLLATE "C" LIMIT %s'


class LifecycleOps(PostgresBase):
    """Cancelling live runs and pruning terminal ones."""

    async def cancel_run(
        self, run_id: str, *, reason: str | None = None, cascade: bool = False
    ) -> list[str]:
        """Cancel run ``run_id`` and, with ``cascade``, each live descendant, in one
        transaction: each becomes ``cancelled`` with its state_transition and loses its
        lease and wait, so its owner's next write raises RunCancelled and no worker claims
        it. Returns the ids cancelled (not the run itself when it already was).

        RunNotFound, or RunTerminal for a completed or failed run, with nothing changed.
        """

        def write(conn: Conn) -> list[str]:
            row = conn.execute(
                "SELECT status FROM agent_runs WHERE id = %s FOR NO KEY UPDATE", (run_id,)
            ).fetchone()
            status = None if row is None else str(row[0])
            refused = cancel_refused(run_id, status)
            if refused is not None:
                raise refused
            targets: list[tuple[str, str, str | None]] = []
            if status in LIVE_STATUSES:
                targets.append((run_id, str(status), None))
            if cascade:
                found = conn.execute(_DESCENDANTS, (run_id,)).fetchall()
                targets += [(str(child), str(old), run_id) for child, old in found]
            error = cancelled_error_text(reason)
            items = []
            for target, old, by in targets:
                (last_seq,) = one(conn, _CANCEL, (error, target))
                items.append((target, int(last_seq) - 1, [cancelled_transition(old, reason, by)]))
            append_checked(conn, items)
            return [target for target, _, _ in targets]

        return await self._write(write)

    async def prune_runs(
        self, *, before: datetime, statuses: Collection[str], max_events: int
    ) -> PruneReport:
        """Delete every run of ``statuses`` (terminal ones) last updated before ``before``,
        with all its rows, a whole run per transaction at most: transactions hold about
        ``max_events`` events each (a larger run alone), so other writers wait briefly. A
        run with a child left is kept (its children go first)."""
        chosen = sorted(set(statuses))
        to_db(before)  # InvalidInput for a naive datetime, as on every backend

        def page(conn: Conn, after: tuple[Any, str] | None) -> list[tuple[str, int, Any]]:
            if after is None:
                rows = conn.execute(_FIRST + _ORDER, (chosen, before, _PAGE))
            else:
                rows = conn.execute(
                    _FIRST + ' AND (updated_at, id COLLATE "C") > (%s, %s)' + _ORDER,
                    (chosen, before, *after, _PAGE),
                )
            return [(str(run_id), int(last_seq), at) for run_id, last_seq, at in rows]

        def delete(conn: Conn, run_ids: tuple[str, ...]) -> tuple[list[str], int]:
            # No reference is added while the sweep judges which pieces only the pruned
            # runs refer to (a writer adds its references before its pieces).
            conn.execute(_HOLD_REFERENCES)
            return delete_whole_runs(
                conn.execute,
                run_ids,
                lambda run_id: (_STILL_PRUNABLE, (run_id, chosen, before)),
                _DELETES,
            )

        async def read_page(after: tuple[Any, str] | None) -> list[tuple[str, int, Any]]:
            return await self._read(partial(page, after=after), offload=True)

        async def delete_batch(run_ids: tuple[str, ...]) -> tuple[list[str], int]:
            return await self._write(partial(delete, run_ids=run_ids))

        report = await prune_passes(read_page, delete_batch, max_events)
        self._content.forget(report.run_ids)
        return report

    async def append_operator_event(self, run_id: str, kind: str, payload_json: str) -> int:
        """Append an operator's event (``budget_set``, ``spin_acknowledged``) to a live
        run's log from outside its owner, and unpark the run if it waits for that event;
        return the event's seq. RunNotFound, or RunTerminal for a finished run, with nothing
        changed."""
        topic = operator_event_topic(kind, run_id)

        def write(conn: Conn) -> int:
            row = conn.execute(
                "SELECT status, wait_kind, wait_ref FROM agent_runs WHERE id = %s "
                "FOR NO KEY UPDATE",
                (run_id,),
            ).fetchone()
            refused = operator_refused(run_id, None if row is None else str(row[0]))
            if refused is not None:
                raise refused
            assert row is not None  # operator_refused names a missing run
            parked = (row[1], row[2]) == ("message", topic)
            budget = payload_json if kind == "budget_set" else None
            statement = _UNPARK if parked else _BUMP
            (last_seq,) = one(conn, statement, (budget, run_id))
            append_checked(conn, [(run_id, int(last_seq) - 1, [NewEvent(kind, payload_json)])])
            return int(last_seq)

        return await self._write(write)

    async def compact_run(self, run_id: str, *, max_events: int) -> CompactReport:
        """Move the run's events up to its latest accepted checkpoint's decision into the
        archive, in transactions of at most ``max_events`` events; tool intents still waiting
        for their result stay. The log read whole is unchanged (both parts merged by seq),
        and so is ``state()``, which reads only what follows the checkpoint. RunNotFound for
        an unknown run; a run without an accepted checkpoint is left as it is."""

        def bounds(conn: Conn) -> tuple[int | None, int, int]:
            if conn.execute(_RUN_EXISTS, (run_id,)).fetchone() is None:
                raise run_not_found(run_id)
            decided = conn.execute(_LATEST_ACCEPTED, (run_id,)).fetchone()
            if decided is None:
                return None, 0, 0
            through = int(decided[0])
            (first,) = one(conn, _FIRST_LIVE, (run_id,))
            (kept,) = one(conn, _OPEN_BEFORE, (run_id, through))
            return through, int(first or through + 1), int(kept)

        def move(conn: Conn, low: int, high: int) -> int:
            conn.execute(_ARCHIVE, (run_id, low, high))
            return int(conn.execute(_UNLOG, (run_id, low, high)).rowcount)

        through, first_live, kept = await self._read(bounds)
        report = CompactReport(run_id, through or 0, kept=kept)
        if through is None:
            return report

        async def move_window(low: int, high: int) -> int:
            return await self._write(partial(move, low=low, high=high))

        return await compact_windows(report, first_live, move_window, max_events)
