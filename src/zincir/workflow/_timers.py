"""Durable sleep: an absolute wake time is stored before any waiting.

Timers are not claims: a restarted ``sleep(name)`` finds the stored wake time and waits only
what remains, without ``recover()``. A due timer is marked completed and returns at once.
"""

from __future__ import annotations

from datetime import timedelta

from .._crash import crash_point
from .._validate import check_duration, check_id
from ..store import WaitAttempt
from ._core import Core

__all__ = ["durable_sleep"]


async def durable_sleep(core: Core, name: str, duration: timedelta | float) -> None:
    """Sleep until the stored wake time of timer ``name`` (created now + ``duration``)."""
    run_id = core.run_id
    check_id(name, "a timer name", run_id=run_id)
    length = check_duration(duration, f"the duration of sleep {name!r}", run_id=run_id)
    stored = await core.store.get_timer(run_id, name)
    if stored is not None and stored.completed:
        return
    store, lease = core.store, core.lease

    async def attempt() -> WaitAttempt[None]:
        tried = await store.sleep_attempt(lease, name, length)
        crash_point("timer.fired" if tried.done else "timer.stored")
        return tried

    await core.block("timer", name, attempt, None)
