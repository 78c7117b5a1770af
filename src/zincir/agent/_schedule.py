"""Schedules: ``runner.schedule`` stores one, and every serving process ticks them.

Each serving process (``runner.serve``) reads the stored schedules of the agents it serves,
starts the ticks due since it last looked, and sleeps until the next tick (or a short
while, to see schedules declared, changed or resumed elsewhere). Starting a tick is one
store transaction that creates the tick's run (its id derived from the schedule's name and
the tick, pending: a ResumeWorker claims it) and records the tick, so of all processes
exactly one starts it. A tick due before the process looked the first time was missed
while nothing served: ``missed="run_once"`` starts the latest such tick, ``"skip"`` none.
Times are the store's clock (``store.now()``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .._errors import InvalidInput
from .._json import dumps
from .._validate import check_id
from ..runs._versions import app_version_or_default
from ..store import Store
from ..store._schedules import ScheduleRecord, ScheduleSpec

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["MISSED", "ScheduleTicker", "check_schedule", "tick_run_id"]

log = logging.getLogger("zincir.schedules")

MISSED: Final = ("run_once", "skip")
LOOK_AGAIN: Final = 10.0
"""Seconds a serving process sleeps at most before it reads the schedules again."""
_MAX_TICKS: Final = 1000
"""Ticks a process starts at most per look (a process that stalled for long catches up
over several looks)."""


def check_schedule(
    name: str,
    cron: str,
    timezone: str,
    agent: str,
    prompt: str,
    missed: str,
    queue: str | None = None,
) -> ScheduleSpec:
    """The spec of a schedule, checked; InvalidInput says what is wrong."""
    check_id(name, "a schedule name")
    check_id(tick_run_id(name, datetime(2000, 1, 1, tzinfo=UTC)), "a scheduled run id")
    if not isinstance(prompt, str):
        raise InvalidInput("prompt must be a str")
    if missed not in MISSED:
        raise InvalidInput(f"missed must be 'run_once' or 'skip', not {missed!r}")
    zone = zone_of(timezone)
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidInput(f"cron must be a cron expression such as '0 7 * * *', not {cron!r}")
    try:
        next(CronSim(cron, datetime.now(zone)))
    except (CronSimError, StopIteration) as error:
        raise InvalidInput(
            f"schedule {name!r}: the cron expression {cron!r} is invalid ({error or 'no tick'}); "
            "give five fields (minute hour day month weekday) or six (seconds first)"
        ) from None
    return ScheduleSpec(name, cron, timezone, agent, prompt, missed, queue)


def zone_of(timezone: str) -> ZoneInfo:
    """The IANA time zone ``timezone``; InvalidInput naming it when it is unknown."""
    if not isinstance(timezone, str) or not timezone:
        raise InvalidInput(f"timezone must be an IANA time zone name, not {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"timezone {timezone!r} is not a known IANA time zone; give a name such as "
            "'Europe/Oslo' or 'UTC'"
        ) from None


def tick_run_id(name: str, tick: datetime) -> str:
    """The run id of schedule ``name``'s tick at ``tick``: the same in every process."""
    return f"schedule-{name}-{tick.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def due_ticks(
    record: ScheduleRecord, previous: datetime, now: datetime
) -> tuple[list[datetime], datetime | None]:
    """The ticks of ``record`` to start now (oldest first) when this process last looked at
    ``previous`` (its first look: ``now``), and its next tick after ``now``."""
    spec = record.spec
    zone = zone_of(spec.timezone)
    base = record.since if record.last_tick is None else max(record.since, record.last_tick)
    starts: list[datetime] = []
    if spec.missed == "run_once" and base < previous:
        missed = next(
            CronSim(
                spec.cron, (previous + timedelta(microseconds=1)).astimezone(zone), reverse=True
            ),
            None,
        )
        if missed is not None and missed > base:
            starts.append(missed)
    following: datetime | None = None
    for tick in CronSim(spec.cron, max(base, previous).astimezone(zone)):
        if tick > now or len(starts) >= _MAX_TICKS:
            following = tick
            break
        starts.append(tick)
    return starts, following


class ScheduleTicker:
    """One serving process's view of the schedules of ``agents`` (by name) in ``store``."""

    def __init__(self, store: Store, agents: Mapping[str, Agent]) -> None:
        self.store = store
        self.agents = dict(agents)
        self._looked: dict[tuple[str, str, str], datetime] = {}
        self.changed = asyncio.Event()
        """Set to read the schedules again at once (one was declared in this process)."""

    async def look(self) -> float:
        """Start every due tick; the seconds until the next one (at most LOOK_AGAIN)."""
        now = self.store.now()
        wake = now + timedelta(seconds=LOOK_AGAIN)
        for record in await self.store.list_schedules():
            spec = record.spec
            if spec.agent not in self.agents or record.paused:
                continue
            key = (spec.name, spec.cron, spec.timezone)
            previous = self._looked.get(key, now)
            self._looked[key] = now
            starts, following = due_ticks(record, previous, now)
            for tick in starts:
                await self._start(record, tick)
            if following is not None and following <= now:  # capped: go on from the last
                self._looked[key] = starts[-1]
            if following is not None:
                wake = min(wake, following)
        return max(0.0, (wake - self.store.now()).total_seconds())

    async def _start(self, record: ScheduleRecord, tick: datetime) -> None:
        spec = record.spec
        run_id = tick_run_id(spec.name, tick)
        config = {
            "agent": spec.agent,
            "prompt": spec.prompt,
            "stream": False,
            "schedule": spec.name,
            "tick": tick.astimezone(UTC).isoformat(),
        }
        started = await self.store.start_schedule_tick(
            spec.name,
            cron=spec.cron,
            timezone=spec.timezone,
            tick=tick,
            run_id=run_id,
            config_json=dumps(config, what="config", run_id=run_id),
            provider=self.agents[spec.agent].model.name,
            app_version=app_version_or_default(None, run_id=run_id),
        )
        if started:
            log.info("[run %s] started by schedule %s", run_id, spec.name)

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set; a failed look (a busy store) is tried again later."""
        while not stop.is_set():
            self.changed.clear()
            try:
                delay = await self.look()
            except Exception as error:  # a busy or broken store: look again shortly
                log.error("starting scheduled runs failed: %s", error)
                delay = 1.0
            waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.changed.wait())}
            try:
                await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
