"""Schedules: a stored cron expression that starts an agent run at each of its ticks.

A tick is started by one transaction that locks the schedule's row (``{for_update}``),
creates the tick's run ``pending`` and unowned (a ResumeWorker claims it) and records the
tick as the schedule's last: of several serving processes starting one tick, exactly one
creates its run and the others find the tick recorded. Tick times are computed by the
caller (``zincir.agent._schedule``); ``since`` bounds them from below: a tick at or before
it (the schedule was declared, changed or resumed then) is never started. The prompt is a
user payload (sealed in an encrypted store).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from ._log import insert_run
from ._queues import QueueSettings, enqueue, settings_of, store_settings
from ._sql import Rules, Tx, sql

__all__ = [
    "Declared",
    "ScheduleOps",
    "ScheduleRecord",
    "ScheduleSpec",
]

Declared = Literal["created", "unchanged", "updated"]

_COLUMNS: Final = (
    "name, cron, timezone, agent, prompt, missed, queue, paused_at, since, last_tick, "
    "last_run_id, created_at, updated_at"
)
_GET: Final = sql(f"SELECT {_COLUMNS} FROM schedules WHERE name = ?{{for_update}}", opens=(4,))
_READ: Final = sql(f"SELECT {_COLUMNS} FROM schedules WHERE name = ?", opens=(4,))
_LIST: Final = sql(f"SELECT {_COLUMNS} FROM schedules ORDER BY name", opens=(4,))
_INSERT: Final = sql(
    "INSERT INTO schedules (name, cron, timezone, agent, prompt, missed, queue, since, "
    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, zincir_now(), zincir_now(), "
    "zincir_now()) ON CONFLICT (name) DO NOTHING RETURNING 1",
    seals=(4,),
)
_UPDATE: Final = sql(
    "UPDATE schedules SET cron = ?, timezone = ?, agent = ?, prompt = ?, missed = ?, "
    "queue = ?, since = zincir_now(), updated_at = zincir_now() WHERE name = ?",
    seals=(3,),
)
_PAUSE: Final = sql(
    "UPDATE schedules SET paused_at = zincir_now(), updated_at = zincir_now() "
    "WHERE name = ? AND paused_at IS NULL RETURNING 1"
)
_RESUME: Final = sql(
    "UPDATE schedules SET paused_at = NULL, since = zincir_now(), updated_at = zincir_now() "
    "WHERE name = ? AND paused_at IS NOT NULL RETURNING 1"
)
_EXISTS: Final = sql("SELECT 1 FROM schedules WHERE name = ?")
_DELETE: Final = sql("DELETE FROM schedules WHERE name = ? RETURNING 1")
_QUEUE: Final = sql(
    "SELECT name, concurrency, concurrency_per_key, rate_limit, rate_period_us FROM queues "
    "WHERE name = ?"
)
_RUN_EXISTS: Final = sql("SELECT 1 FROM agent_runs WHERE id = ?")
_TICKED: Final = sql(
    "UPDATE schedules SET last_tick = ?, last_run_id = ?, updated_at = zincir_now() WHERE name = ?"
)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What declaring a schedule stores: its name, cron expression (checked by the caller),
    IANA time zone, agent name, prompt, what a missed tick does and its queue (or None)."""

    name: str
    cron: str
    timezone: str
    agent: str
    prompt: str
    missed: str = "run_once"
    queue: str | None = None

    def settings(self) -> tuple[str, str, str, str, str, str | None]:
        """Everything but the name: what a re-declaration compares."""
        return (self.cron, self.timezone, self.agent, self.prompt, self.missed, self.queue)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule: its spec, when it was paused (None: active), the time ticks start
    after (``since``), the last tick started and its run id, and its times."""

    spec: ScheduleSpec
    paused_at: datetime | None
    since: datetime
    last_tick: datetime | None
    last_run_id: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


def _record(tx: Tx, row: tuple[Any, ...]) -> ScheduleRecord:
    name, cron, timezone, agent, prompt, missed = (str(value) for value in row[:6])
    spec = ScheduleSpec(name, cron, timezone, agent, prompt, missed, row[6])
    return ScheduleRecord(
        spec,
        paused_at=None if row[7] is None else tx.time(row[7]),
        since=tx.time(row[8]),
        last_tick=None if row[9] is None else tx.time(row[9]),
        last_run_id=row[10],
        created_at=tx.time(row[11]),
        updated_at=tx.time(row[12]),
    )


def declare_schedule(tx: Tx, spec: ScheduleSpec, queue: QueueSettings | None = None) -> Declared:
    """Store ``spec`` (and its queue's settings): created, unchanged (the same settings), or
    updated (its ticks then start after now; the last tick started is kept)."""
    if queue is not None:
        store_settings(tx, queue)
    params = (spec.cron, spec.timezone, spec.agent, spec.prompt, spec.missed, spec.queue)
    if tx.one(_INSERT, (spec.name, *params)) is not None:
        return "created"
    row = tx.one(_GET, (spec.name,))
    if row is not None and _record(tx, row).spec.settings() == spec.settings():
        return "unchanged"
    tx.execute(_UPDATE, (*params, spec.name))
    return "updated"


def start_tick(
    tx: Tx,
    name: str,
    cron: str,
    timezone: str,
    tick: datetime,
    run_id: str,
    config_json: str,
    provider: str = "",
    app_version: str | None = None,
) -> bool:
    """Start tick ``tick`` of schedule ``name`` (computed from ``cron`` in ``timezone``):
    create its run ``run_id`` pending (waiting in the schedule's queue, if it names one),
    unless it exists, and record the tick. False when the schedule is gone, paused, changed,
    the tick is not after ``since`` and the last tick, or the run already exists."""
    row = tx.one(_GET, (name,))
    if row is None:
        return False
    record = _record(tx, row)
    if record.paused or (record.spec.cron, record.spec.timezone) != (cron, timezone):
        return False
    if tick <= record.since or (record.last_tick is not None and tick <= record.last_tick):
        return False
    agent, queue = record.spec.agent, record.spec.queue
    if tx.one(_RUN_EXISTS, (run_id,)) is not None:
        created = False
    elif queue is None:
        created = insert_run(
            tx,
            run_id,
            name=agent,
            provider=provider,
            config_json=config_json,
            app_version=app_version,
        )
    else:
        row = tx.one(_QUEUE, (queue,))
        settings = QueueSettings(queue) if row is None else settings_of(row)
        _, created = enqueue(
            tx,
            run_id,
            settings,
            name=agent,
            provider=provider,
            config_json=config_json,
            key=None,
            priority=0,
            dedupe_id=None,
            app_version=app_version,
        )
    tx.execute(_TICKED, (tx.stamp(tick), run_id, name))
    return created


class ScheduleOps(Rules):
    """Schedules: declared, listed, paused, resumed, deleted, and their ticks started."""

    async def declare_schedule(
        self, spec: ScheduleSpec, queue: QueueSettings | None = None
    ) -> Declared:
        """Store schedule ``spec`` (and ``queue``'s settings): ``created``, ``unchanged``
        (same settings) or ``updated`` (new settings; ticks start after now)."""
        return await self._write_tx(lambda tx: declare_schedule(tx, spec, queue))

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Schedule ``name`` as stored, or None."""

        def read(tx: Tx) -> ScheduleRecord | None:
            row = tx.one(_READ, (name,))
            return None if row is None else _record(tx, row)

        return await self._read_tx(read)

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every stored schedule, by name."""
        return await self._read_tx(lambda tx: [_record(tx, row) for row in tx.all(_LIST)])

    async def pause_schedule(self, name: str, paused: bool) -> bool | None:
        """Pause (or resume: ticks then start after now) schedule ``name``; whether that
        changed it, None when there is no such schedule."""

        def write(tx: Tx) -> bool | None:
            if tx.one(_PAUSE if paused else _RESUME, (name,)) is not None:
                return True
            return None if tx.one(_EXISTS, (name,)) is None else False

        return await self._write_tx(write)

    async def delete_schedule(self, name: str) -> bool:
        """Delete schedule ``name`` (runs it started stay); False when there was none."""
        return await self._write_tx(lambda tx: tx.one(_DELETE, (name,)) is not None)

    async def start_schedule_tick(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        tick: datetime,
        run_id: str,
        config_json: str,
        provider: str = "",
        app_version: str | None = None,
    ) -> bool:
        """Create tick ``tick``'s run ``run_id`` (pending, with ``config_json``) and record
        the tick, once across processes; whether this call created it."""
        return await self._write_tx(
            lambda tx: start_tick(
                tx, name, cron, timezone, tick, run_id, config_json, provider, app_version
            )
        )
