"""Durable queues: a queue's stored settings, runs waiting in it, and their admission.

A queued run is a ``pending`` run waiting on a message that never comes (``wait_kind``
``message``, ``wait_ref`` :data:`QUEUE_TOPIC`), so no claim takes it. A serving process
admits waiting runs (clears the wait, stamps ``queue_started_at``), which any worker then
claims. Admission holds the queue's row (PostgreSQL: ``{for_update}``; SQLite runs one
writer), so the check of the queue's limits and the admission are one atomic step across
processes. A run counts against its queue while it is live and not parked on a message (a
person's decision, a budget, a ``send``): admitted, running, backing off, or held by a
dead owner until it is taken over and finishes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from ._claims import Backoff, claim
from ._log import insert_run
from ._records import Lease
from ._run_rules import run_exists_error
from ._sql import Params, Rules, Sql, Tx, micros, sql

__all__ = [
    "QUEUE_TOPIC",
    "QueueDepth",
    "QueueOps",
    "QueueSettings",
    "QueuedRun",
    "admit",
    "enqueue",
    "is_queued",
    "read_depths",
    "read_places",
    "settings_of",
    "snapshot_depths",
    "snapshot_places",
    "store_settings",
]

QUEUE_TOPIC: Final = "zincir.queue"
"""The topic a queued run waits on until it is admitted."""

_LOCKS: Final = 2053731701  # the lock space of dedupe ids ("zqdu")
_LIVE: Final = (
    "{r}.status IN ('pending', 'running') AND ({r}.wait_kind IS NULL OR {r}.wait_kind <> 'message')"
)
_WAITING: Final = (
    "{r}.queue_started_at IS NULL AND {r}.status = 'pending' AND {r}.wait_kind = 'message' "
    "AND {r}.wait_ref = 'zincir.queue'"
)


def _live(alias: str) -> str:
    return _LIVE.replace("{r}", alias)


def _waiting(alias: str) -> str:
    return _WAITING.replace("{r}", alias)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's limits as stored (None: no limit): runs at once, runs at once per key, and
    at most ``rate_limit`` starts per ``rate_period``."""

    name: str
    concurrency: int | None = None
    concurrency_per_key: int | None = None
    rate_limit: int | None = None
    rate_period: timedelta | None = None


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A queue's settings, how many runs wait in it and how many hold a slot."""

    settings: QueueSettings
    waiting: int
    live: int


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """A run's place in a queue: the queue, its key and priority, whether it still waits,
    and the limit holding it (None: none does; it waits for a serving process)."""

    run_id: str
    queue: str
    key: str | None
    priority: int
    waiting: bool
    held_by: str | None = None


_UPSERT: Final = sql(
    "INSERT INTO queues (name, concurrency, concurrency_per_key, rate_limit, rate_period_us, "
    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, zincir_now(), zincir_now()) "
    "ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, "
    "concurrency_per_key = excluded.concurrency_per_key, rate_limit = excluded.rate_limit, "
    "rate_period_us = excluded.rate_period_us, updated_at = excluded.updated_at "
    "WHERE queues.concurrency IS DISTINCT FROM excluded.concurrency "
    "OR queues.concurrency_per_key IS DISTINCT FROM excluded.concurrency_per_key "
    "OR queues.rate_limit IS DISTINCT FROM excluded.rate_limit "
    "OR queues.rate_period_us IS DISTINCT FROM excluded.rate_period_us"
)
_DEDUPED: Final = sql("SELECT id FROM agent_runs WHERE queue = ? AND queue_dedupe = ?")
_QUEUE_OF: Final = sql("SELECT queue FROM agent_runs WHERE id = ?")
_PLACE: Final = sql(
    "UPDATE agent_runs SET queue = ?, queue_key = ?, queue_priority = ?, queue_dedupe = ?, "
    f"wait_kind = 'message', wait_ref = '{QUEUE_TOPIC}', wait_until = NULL WHERE id = ?"
)
_NAMED: Final = {True: " AND r.name {in_list}", False: ""}
"""The filter of the runs of a worker's names (a worker without names: every run)."""
_ANY_WAITING: Final = {
    named: sql(
        f"SELECT 1 FROM agent_runs AS r WHERE r.queue IS NOT NULL AND {_waiting('r')}"
        f"{_NAMED[named]} LIMIT 1"
    )
    for named in (True, False)
}
_WAITING_QUEUES: Final = {
    named: sql(
        f"SELECT DISTINCT r.queue FROM agent_runs AS r WHERE r.queue IS NOT NULL AND "
        f"{_waiting('r')}{_NAMED[named]}"
    )
    for named in (True, False)
}
_SETTINGS_COLUMNS: Final = "name, concurrency, concurrency_per_key, rate_limit, rate_period_us"
_LOCK_QUEUE: Final = sql(f"SELECT {_SETTINGS_COLUMNS} FROM queues WHERE name = ?{{for_update}}")
_ALL_QUEUES: Final = sql(f"SELECT {_SETTINGS_COLUMNS} FROM queues ORDER BY name")
_LIVE_COUNT: Final = sql(f"SELECT count(*) FROM agent_runs AS r WHERE r.queue = ? AND {_live('r')}")
_WAITING_COUNT: Final = sql(
    f"SELECT count(*) FROM agent_runs AS r WHERE r.queue = ? AND {_waiting('r')}"
)
_LIVE_OF_KEY: Final = sql(
    f"SELECT count(*) FROM agent_runs AS r WHERE r.queue = ? AND r.queue_key = ? AND {_live('r')}"
)
_LIVE_BY_KEY: Final = sql(
    f"SELECT r.queue_key, count(*) FROM agent_runs AS r WHERE r.queue = ? "
    f"AND r.queue_key IS NOT NULL AND {_live('r')} GROUP BY r.queue_key"
)
_RECENT: Final = sql(
    "SELECT count(*) FROM agent_runs WHERE queue = ? AND queue_started_at > {now_plus}"
)
_STARTED_SINCE: Final = sql(
    "SELECT count(*) FROM agent_runs WHERE queue = ? AND queue_started_at > ?"
)
_CANDIDATES: Final = {
    named: sql(
        "SELECT w.id, w.queue_key FROM (SELECT r.id, r.queue_key, r.queue_priority, "
        "r.created_at, ROW_NUMBER() OVER (PARTITION BY r.queue_key "
        "ORDER BY r.queue_priority DESC, r.created_at, r.id) AS rn "
        f"FROM agent_runs AS r WHERE r.queue = ? AND {_waiting('r')}{_NAMED[named]}) AS w "
        "WHERE w.queue_key IS NULL OR CAST(? AS integer) IS NULL "
        "OR w.rn + (SELECT count(*) FROM agent_runs AS l "
        f"WHERE l.queue = ? AND l.queue_key = w.queue_key AND {_live('l')}) "
        "<= CAST(? AS integer) ORDER BY w.queue_priority DESC, w.created_at, w.id LIMIT ?"
    )
    for named in (True, False)
}
_ADMIT: Final = sql(
    "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    f"queue_started_at = zincir_now(), updated_at = zincir_now() WHERE id {{in_list}} "
    f"AND {_waiting('agent_runs')}"
)
_START_ONE: Final = sql(
    "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    f"queue_started_at = zincir_now() WHERE id = ? AND {_waiting('agent_runs')} RETURNING 1"
)
_PLACES: Final = sql(
    "SELECT id, queue, queue_key, queue_priority, "
    "CASE WHEN queue_started_at IS NULL AND status = 'pending' AND wait_kind = 'message' "
    "AND wait_ref = 'zincir.queue' "
    "THEN 1 ELSE 0 END FROM agent_runs WHERE queue IS NOT NULL AND id {in_list}"
)


def is_queued(run: Mapping[str, Any]) -> bool:
    """Whether the run (a stored row) still waits in its queue."""
    return bool(
        run["status"] == "pending"
        and run["wait_kind"] == "message"
        and run["wait_ref"] == QUEUE_TOPIC
    )


def settings_of(row: Sequence[object]) -> QueueSettings:
    name, concurrency, per_key, rate, period = row
    return QueueSettings(
        str(name),
        None if concurrency is None else int(concurrency),  # type: ignore[call-overload]
        None if per_key is None else int(per_key),  # type: ignore[call-overload]
        None if rate is None else int(rate),  # type: ignore[call-overload]
        None if period is None else timedelta(microseconds=int(period)),  # type: ignore[call-overload]
    )


def store_settings(tx: Tx, settings: QueueSettings) -> None:
    """Store ``settings`` (the newest declaration replaces a different stored one)."""
    period = None if settings.rate_period is None else micros(settings.rate_period)
    tx.execute(
        _UPSERT,
        (
            settings.name,
            settings.concurrency,
            settings.concurrency_per_key,
            settings.rate_limit,
            period,
        ),
    )


def enqueue(
    tx: Tx,
    run_id: str,
    settings: QueueSettings,
    *,
    name: str,
    provider: str,
    config_json: str,
    key: str | None,
    priority: int,
    dedupe_id: str | None,
    app_version: str | None,
) -> tuple[str, bool]:
    """Store run ``run_id`` waiting in the queue; (its id, True), or (the id of the run
    enqueued before with ``dedupe_id``, False); a run id taken by a run of that queue is
    returned as it is, one taken by another run raises RunExists."""
    store_settings(tx, settings)
    if dedupe_id is not None:
        tx.lock(_LOCKS, [f"{settings.name}\n{dedupe_id}"], exclusive=True)
        found = tx.one(_DEDUPED, (settings.name, dedupe_id))
        if found is not None:
            return str(found[0]), False
    if not insert_run(
        tx, run_id, name=name, provider=provider, config_json=config_json, app_version=app_version
    ):
        row = tx.one(_QUEUE_OF, (run_id,))
        if row is not None and row[0] == settings.name:
            return run_id, False
        raise run_exists_error(run_id, "enqueue it under a new run id (or none: one is made)")
    tx.execute(_PLACE, (settings.name, key, priority, dedupe_id, run_id))
    return run_id, True


def _room(tx: Tx, settings: QueueSettings, budget: int) -> int:
    """How many runs the queue may start now, at most ``budget``."""
    free = budget
    if settings.concurrency is not None:
        (live,) = tx.one(_LIVE_COUNT, (settings.name,)) or (0,)
        free = min(free, settings.concurrency - int(live))
    if settings.rate_limit is not None and settings.rate_period is not None and free > 0:
        (recent,) = tx.one(_RECENT, (settings.name, -micros(settings.rate_period))) or (0,)
        free = min(free, settings.rate_limit - int(recent))
    return free


def _any_waiting(tx: Tx, names: Collection[str] | None) -> bool:
    """Whether a run named one of ``names`` (None: any) waits in a queue."""
    named = () if names is None else (tx.values(list(names)),)
    return tx.one(_ANY_WAITING[names is not None], named) is not None


def admit(tx: Tx, names: Collection[str] | None, limit: int) -> list[str]:
    """Admit up to ``limit`` waiting runs named one of ``names`` (None: any), queue by queue,
    each queue's in priority order (higher first) then age, within its limits; their ids."""
    named = () if names is None else (tx.values(list(names)),)
    filtered = names is not None
    queues = sorted(str(row[0]) for row in tx.all(_WAITING_QUEUES[filtered], named))
    admitted: list[str] = []
    for queue in queues:
        budget = limit - len(admitted)
        if budget <= 0:
            break
        row = tx.one(_LOCK_QUEUE, (queue,))
        if row is None:
            continue
        settings = settings_of(row)
        free = _room(tx, settings, budget)
        if free <= 0:
            continue
        per_key = settings.concurrency_per_key
        keyed = {str(k): int(n) for k, n in tx.all(_LIVE_BY_KEY, (queue,))} if per_key else {}
        chosen: list[str] = []
        params = (queue, *named, per_key, queue, per_key, free)
        for run_id, key in tx.all(_CANDIDATES[filtered], params):
            if per_key is not None and key is not None:
                if keyed.get(key, 0) >= per_key:
                    continue
                keyed[key] = keyed.get(key, 0) + 1
            chosen.append(str(run_id))
            if len(chosen) >= free:
                break
        if chosen:
            tx.execute(_ADMIT, (tx.values(chosen),))
            admitted.extend(chosen)
    return admitted


class _Reads(Protocol):
    """What the queue reads need of a transaction: a write one, or the read-only view's."""

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None: ...
    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]: ...
    def stamp(self, moment: datetime | None) -> object: ...
    def values(self, items: Sequence[str]) -> object: ...


def _count(tx: _Reads, statement: Sql, params: Params) -> int:
    row = tx.one(statement, params)
    return 0 if row is None else int(row[0])


def _held_by(tx: _Reads, settings: QueueSettings | None, key: str | None, now: datetime) -> str:
    """Which limit of the queue holds a waiting run of ``key`` at ``now``, as a phrase."""
    if settings is None:
        return "its queue's settings are not stored"
    if settings.concurrency is not None:
        live = _count(tx, _LIVE_COUNT, (settings.name,))
        if live >= settings.concurrency:
            return f"concurrency ({live} of {settings.concurrency} running)"
    if settings.concurrency_per_key is not None and key is not None:
        live = _count(tx, _LIVE_OF_KEY, (settings.name, key))
        if live >= settings.concurrency_per_key:
            return (
                f"concurrency_per_key ({live} of {settings.concurrency_per_key} running "
                f"with key {key!r})"
            )
    if settings.rate_limit is not None and settings.rate_period is not None:
        since = tx.stamp(now - settings.rate_period)
        recent = _count(tx, _STARTED_SINCE, (settings.name, since))
        if recent >= settings.rate_limit:
            return f"rate ({recent} started in the last {settings.rate_period})"
    return "no limit: waiting for a process serving its agent (runner.serve)"


def read_depths(tx: _Reads) -> list[QueueDepth]:
    """Every stored queue with how many runs wait in it and hold a slot."""
    found = []
    for row in tx.all(_ALL_QUEUES):
        settings = settings_of(row)
        waiting = _count(tx, _WAITING_COUNT, (settings.name,))
        live = _count(tx, _LIVE_COUNT, (settings.name,))
        found.append(QueueDepth(settings, waiting, live))
    return found


def read_places(tx: _Reads, run_ids: Sequence[str], now: datetime) -> dict[str, QueuedRun]:
    """The queue places of those of ``run_ids`` that were enqueued, by run id; a waiting
    one names the limit holding it at ``now``."""
    if not run_ids:
        return {}
    settings = {str(row[0]): settings_of(row) for row in tx.all(_ALL_QUEUES)}
    found: dict[str, QueuedRun] = {}
    for run_id, queue, key, priority, waiting in tx.all(_PLACES, (tx.values(list(run_ids)),)):
        held = _held_by(tx, settings.get(str(queue)), key, now) if waiting else None
        found[str(run_id)] = QueuedRun(
            str(run_id), str(queue), key, int(priority), bool(waiting), held
        )
    return found


def _snapshot_tx(snapshot: object) -> _Reads | None:
    """The read transaction of a read-only snapshot whose schema has queues, else None."""
    tables: frozenset[str] = getattr(snapshot, "_tables", frozenset())
    tx: _Reads | None = getattr(snapshot, "_tx", None)
    return tx if "queues" in tables else None


def snapshot_places(
    snapshot: object, run_ids: Sequence[str], now: datetime
) -> dict[str, QueuedRun]:
    """:func:`read_places` in a read-only view's snapshot (none before queues existed)."""
    tx = _snapshot_tx(snapshot)
    return {} if tx is None else read_places(tx, run_ids, now)


def snapshot_depths(snapshot: object) -> list[QueueDepth]:
    """:func:`read_depths` in a read-only view's snapshot (none before queues existed)."""
    tx = _snapshot_tx(snapshot)
    return [] if tx is None else read_depths(tx)


class QueueOps(Rules):
    """Queues: their settings, enqueued runs and their admission."""

    async def store_queue(self, settings: QueueSettings) -> None:
        """Store a queue's settings (the newest declaration replaces different ones)."""
        await self._write_tx(lambda tx: store_settings(tx, settings))

    async def enqueue_run(
        self,
        run_id: str,
        settings: QueueSettings,
        *,
        name: str,
        provider: str = "",
        config_json: str = "{}",
        key: str | None = None,
        priority: int = 0,
        dedupe_id: str | None = None,
        app_version: str | None = None,
    ) -> tuple[str, bool]:
        """Store a pending run waiting in queue ``settings.name`` (its settings stored too);
        (its id, True), or (the run already enqueued with ``dedupe_id``, False)."""
        return await self._write_tx(
            lambda tx: enqueue(
                tx,
                run_id,
                settings,
                name=name,
                provider=provider,
                config_json=config_json,
                key=key,
                priority=priority,
                dedupe_id=dedupe_id,
                app_version=app_version,
            )
        )

    async def admit_queued(self, names: Collection[str] | None, limit: int) -> list[str]:
        """Admit up to ``limit`` queued runs with one of ``names`` (None: any) within their
        queues' limits (checked and admitted atomically); their ids. No write when none
        waits."""
        if limit < 1:
            return []
        listed = None if names is None else list(names)
        if not await self._read_tx(lambda tx: _any_waiting(tx, listed)):
            return []
        return await self._write_tx(lambda tx: admit(tx, listed, limit), durable=False)

    async def claim_queued_runs(
        self,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        max_attempts: int | None,
        backoff: Backoff,
        app_versions: Collection[str] | None = None,
        names: Collection[str] | None = None,
    ) -> list[Lease]:
        """``claim_runs`` after admitting up to ``limit`` queued runs with one of ``names``
        (None: any) within their queues' limits, in one write transaction (a plain claim
        when none waits)."""
        listed = None if names is None else list(names)

        def write(tx: Tx) -> list[Lease]:
            if _any_waiting(tx, listed):  # here, not in a read first: one round trip less
                admit(tx, listed, limit)
            return claim(tx, owner, ttl, limit, max_attempts, backoff, app_versions, listed)

        return await self._write_tx(write)

    async def start_queued_run(self, run_id: str) -> bool:
        """Take run ``run_id`` out of its queue as started, outside the queue's limits (it
        then counts against them); False when it waits in no queue."""
        return await self._write_tx(lambda tx: tx.one(_START_ONE, (run_id,)) is not None)

    async def queue_depths(self) -> list[QueueDepth]:
        """Every stored queue with how many runs wait in it and hold a slot."""
        return await self._read_tx(read_depths)

    async def queued_runs(self, run_ids: Sequence[str]) -> dict[str, QueuedRun]:
        """The queue places of those of ``run_ids`` that were enqueued, by run id; a waiting
        one names the limit holding it."""
        now = datetime.now(UTC)
        return await self._read_tx(lambda tx: read_places(tx, run_ids, now))
