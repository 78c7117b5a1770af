"""Queues and schedules as the read-only view shows them (the inspector): each enqueued
run's place, each queue's limits, depth and runs, each schedule; a database without their
tables (an older schema) has none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ._queues import QueueDepth, _live, _waiting, read_depths, read_places
from ._sql import sql

if TYPE_CHECKING:
    from ._readonly_queries import ReadTx

__all__ = ["QueueEntry", "QueuePlace", "QueueReads", "ScheduleRow"]

_STARTED: Final = sql(
    "SELECT id, queue_started_at FROM agent_runs WHERE queue IS NOT NULL AND id {in_list}"
)
_ENTRIES: Final = sql(
    "SELECT r.id, r.name, r.status, r.queue_key, r.queue_priority, r.queue_started_at, "
    f"r.created_at, CASE WHEN {_waiting('r')} THEN 1 ELSE 0 END AS waiting "
    f"FROM agent_runs AS r WHERE r.queue = ? AND (({_waiting('r')}) OR ({_live('r')})) "
    "ORDER BY waiting, r.queue_priority DESC, r.created_at, r.id LIMIT ?"
)
_SCHEDULES: Final = sql(
    "SELECT name, cron, timezone, agent, missed, queue, paused_at, last_tick, last_run_id "
    "FROM schedules ORDER BY name LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """A run's place in its queue: queue, key, priority, whether it still waits, the limit
    holding it (a phrase, None when none does), and when it left the queue (stored text)."""

    queue: str
    key: str | None
    priority: int
    waiting: bool
    held_by: str | None
    started_at: str | None


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A run of a queue: waiting in it, or holding a slot (``waiting`` False)."""

    run_id: str
    name: str
    status: str
    key: str | None
    priority: int
    waiting: bool
    started_at: str | None
    created_at: str


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A stored schedule without its prompt: cron, time zone, agent, what a missed tick
    does, its queue, when paused (None: active), its last tick and that tick's run."""

    name: str
    cron: str
    timezone: str
    agent: str
    missed: str
    queue: str | None
    paused_at: str | None
    last_tick: str | None
    last_run_id: str | None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class QueueReads:
    """Queues and schedules in a read-only snapshot."""

    _tx: ReadTx
    _tables: frozenset[str]

    def queue_places(self, run_ids: Sequence[str], now: datetime) -> dict[str, QueuePlace]:
        """The places of those of ``run_ids`` that were enqueued, by run id; a waiting one
        names the limit holding it at ``now``."""
        if "queues" not in self._tables or not run_ids:
            return {}
        places = read_places(self._tx, run_ids, now)
        started = {
            str(row["id"]): _text(row["queue_started_at"])
            for row in self._tx.rows(_STARTED, (self._tx.values(list(places)),))
        }
        return {
            run_id: QueuePlace(
                p.queue, p.key, p.priority, p.waiting, p.held_by, started.get(run_id)
            )
            for run_id, p in places.items()
        }

    def queue_depths(self) -> list[QueueDepth]:
        """Every stored queue with its limits, runs waiting and runs holding a slot."""
        return read_depths(self._tx) if "queues" in self._tables else []

    def queue_entries(self, queue: str, limit: int = 100) -> list[QueueEntry]:
        """Queue ``queue``'s runs holding a slot then those waiting (by priority, then
        age), at most ``limit``."""
        if "queues" not in self._tables:
            return []
        return [
            QueueEntry(
                str(row["id"]),
                str(row["name"]),
                str(row["status"]),
                _text(row["queue_key"]),
                int(row["queue_priority"]),
                bool(row["waiting"]),
                _text(row["queue_started_at"]),
                str(row["created_at"]),
            )
            for row in self._tx.rows(_ENTRIES, (queue, limit))
        ]

    def schedules(self, limit: int = 500) -> list[ScheduleRow]:
        """The stored schedules by name (their prompts left out), at most ``limit``."""
        if "schedules" not in self._tables:
            return []
        return [
            ScheduleRow(
                str(row["name"]),
                str(row["cron"]),
                str(row["timezone"]),
                str(row["agent"]),
                str(row["missed"]),
                _text(row["queue"]),
                _text(row["paused_at"]),
                _text(row["last_tick"]),
                _text(row["last_run_id"]),
            )
            for row in self._tx.rows(_SCHEDULES, (limit,))
        ]
