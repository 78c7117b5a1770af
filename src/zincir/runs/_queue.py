"""Durable queues, below the agent layer: ``Queue`` (a queue's limits, stored with it the
first time it is used) and the storing of a run waiting in one, shared by ``runner.enqueue``
(agent runs) and ``ResumeWorker.enqueue`` (workflow runs)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Final

from .._errors import InvalidInput
from .._validate import check_count, check_id, shown
from ..store import Store
from ..store._queues import QueueSettings
from ._versions import app_version_or_default

__all__ = ["Queue", "check_place", "store_queued"]

log = logging.getLogger("zincir.queue")

_PRIORITY: Final = 2**31 - 1


class Queue:
    """A durable queue: runs enqueued in it start in priority order (higher first), then age,
    never more than ``concurrency`` at once across every serving process, nor more than
    ``concurrency_per_key`` of one key, nor more than ``rate = (n, period)`` starts per
    ``period`` (a ``timedelta`` or seconds). None: no such limit.

    The settings are stored the first time the queue is used; a later declaration with
    different settings replaces them (the newest declaration wins).
    """

    __slots__ = ("concurrency", "concurrency_per_key", "name", "rate")

    def __init__(
        self,
        name: str,
        concurrency: int | None = None,
        concurrency_per_key: int | None = None,
        rate: tuple[int, timedelta | float] | None = None,
    ) -> None:
        self.name = check_id(name, "a queue name")
        self.concurrency = None if concurrency is None else check_count(concurrency, "concurrency")
        self.concurrency_per_key = (
            None
            if concurrency_per_key is None
            else check_count(concurrency_per_key, "concurrency_per_key")
        )
        self.rate = None if rate is None else _check_rate(rate)

    def __repr__(self) -> str:
        return (
            f"Queue({self.name!r}, concurrency={self.concurrency!r}, "
            f"concurrency_per_key={self.concurrency_per_key!r}, rate={self.rate!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and self.settings() == other.settings()

    def __hash__(self) -> int:
        return hash(self.settings())

    def settings(self) -> QueueSettings:
        """The settings the store keeps for this queue."""
        count, period = (None, None) if self.rate is None else self.rate
        return QueueSettings(self.name, self.concurrency, self.concurrency_per_key, count, period)


def _check_rate(rate: object) -> tuple[int, timedelta]:
    """``rate`` as (starts, period): a count and a positive timedelta (or seconds)."""
    if not isinstance(rate, tuple) or len(rate) != 2:
        raise InvalidInput(
            f"rate must be (starts, period), e.g. (10, timedelta(minutes=1)), not {shown(rate)}"
        )
    count, period = rate
    starts = check_count(count, "rate's starts")
    if isinstance(period, bool) or not isinstance(period, timedelta | int | float):
        raise InvalidInput(f"rate's period must be a timedelta or seconds, not {shown(period)}")
    span = period if isinstance(period, timedelta) else timedelta(seconds=period)
    if not timedelta(milliseconds=1) <= span <= timedelta(days=366):
        raise InvalidInput(f"rate's period must be 1 ms to 366 days, not {span}")
    return starts, span


def _check_key(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 512:
        raise InvalidInput(f"{what} must be a non-empty str (at most 512), not {shown(value)}")
    return value


def check_place(key: object, priority: object, dedupe_id: object) -> tuple[str | None, str | None]:
    """A queued run's ``key`` and ``dedupe_id``, checked, once ``priority`` is checked."""
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > _PRIORITY:
        raise InvalidInput(f"priority must be an int in ±{_PRIORITY}, not {shown(priority)}")
    return _check_key(key, "key"), _check_key(dedupe_id, "dedupe_id")


async def store_queued(
    store: Store,
    run_id: str,
    queue: object,
    *,
    name: str,
    config_json: str,
    key: object,
    priority: object,
    dedupe_id: object,
    provider: str = "",
) -> str:
    """Store run ``run_id`` (``name``, ``config_json``) waiting in ``queue``, its place
    checked; its id, or that of the run enqueued before in that queue with ``dedupe_id``."""
    if not isinstance(queue, Queue):
        raise InvalidInput(f"queue must be a zincir.Queue, not {shown(queue)}")
    checked_key, checked_dedupe = check_place(key, priority, dedupe_id)
    assert isinstance(priority, int)
    found, created = await store.enqueue_run(
        run_id,
        queue.settings(),
        name=name,
        provider=provider,
        config_json=config_json,
        key=checked_key,
        priority=priority,
        dedupe_id=checked_dedupe,
        app_version=app_version_or_default(None, run_id=run_id),
    )
    if created:
        log.info("[run %s] enqueued in %s", found, queue.name)
    return found
