"""The local deadline of each lease this process holds: no new work starts past it.

A lease expires at the store; the holder learns of a takeover only at its next write. An
event loop starved past the lease's expiry (a CPU-bound handler) could meanwhile start a
tool call or a step body that a new owner is also running. So each heartbeat notes how long
its lease is surely valid (this process's monotonic time when it started or began a
renewal, plus nine tenths of the TTL: the tenth covers the moments between the store's grant
and that reading), and work checks that deadline before it starts. Real time, not the
store's clock: a test's fake clock jumping over a sleep starves nothing.
"""

from __future__ import annotations

import time

from ._errors import LeaseLost
from .store import Lease

__all__ = ["extend", "forget", "lapsed"]

_DEADLINES: dict[tuple[str, str, int], float] = {}


def _key(lease: Lease) -> tuple[str, str, int]:
    return lease.run_id, lease.owner, lease.token


def extend(lease: Lease, since: float) -> None:
    """``lease`` was granted or renewed no earlier than ``since`` (``time.monotonic()``)."""
    _DEADLINES[_key(lease)] = since + lease.ttl.total_seconds() * 0.9


def forget(lease: Lease) -> None:
    """The holder of ``lease`` stopped."""
    _DEADLINES.pop(_key(lease), None)


def lapsed(lease: Lease) -> LeaseLost | None:
    """The error for work about to start under ``lease`` past its deadline, if it is."""
    until = _DEADLINES.get(_key(lease))
    if until is None:
        return None
    late = time.monotonic() - until
    if late < 0:
        return None
    return LeaseLost(
        f"the lease was {late:.3f}s past its local deadline when this work was to start "
        f"(no renewal for nine tenths of its {lease.ttl.total_seconds():g}s TTL: a blocked "
        "event loop?); another owner may hold the run, so no new work starts here: recover "
        "the run",
        run_id=lease.run_id,
    )
