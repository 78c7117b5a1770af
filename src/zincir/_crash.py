"""Named crash points: where a fault-injection test may kill this process (SIGKILL).

Every boundary where a crash matters (a transaction's BEGIN and COMMIT, a claim before its
body runs, a result before it is stored) calls :func:`crash_point` with its name. Unarmed,
the call returns at once. ``ZINCIR_CRASH_AT=name[:nth]`` (or :func:`arm`, for a process
forked after import) kills the process on the point's ``nth`` hit (default the first);
``ZINCIR_CRASH_CENSUS=path`` writes each point's hit count to ``path`` as JSON at exit,
so a test can pick an ``nth`` the workload reaches.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
from typing import Final

from ._errors import InvalidInput

__all__ = ["CRASH_POINTS", "arm", "census", "count", "crash_point", "disarm"]

CRASH_POINTS: Final[dict[str, str]] = {
    "store.before_begin": "a write transaction is about to begin",
    "store.after_begin": "a write transaction has begun; nothing written yet",
    "store.after_statements": "every statement ran; COMMIT not yet issued",
    "store.after_commit": "COMMIT returned; no caller has been answered",
    "store.content_half_written": "half of an input's new content rows are written; the "
    "rest, the references and the operation row are not",
    "lease.before_renew": "the heartbeat is about to renew the run's lease",
    "lease.after_renew": "the heartbeat renewed the lease",
    "timer.stored": "a durable sleep's wake time is stored; the wait has not begun",
    "timer.fired": "a durable sleep's wake time has passed; the caller not yet resumed",
    "step.claimed": "a step's claim is committed; its body has not run",
    "step.body_done": "a step's body returned; its result is not stored",
    "step.completed": "a step's result is committed; the caller not yet answered",
    "checkpoint.proposed": "a checkpoint candidate is stored; its verifier has not run",
    "checkpoint.verified": "the verifier decided; the decision is not stored",
    "checkpoint.decided": "the checkpoint decision is committed",
    "worker.claimed": "a ResumeWorker claimed a run; its handler has not started",
    "operation.claimed": "an operation's claim is committed; its handler has not run",
    "operation.handled": "an operation's handler returned; its record is not stored",
    "operation.recorded": "an operation's record is committed; the caller not yet answered",
    "agent.response_logged": "the agent loop has a model response and its tool intents",
    "agent.tools_done": "the agent loop has every tool result of one response",
}
"""Every crash point and the moment it marks."""


def _parse(value: str) -> tuple[str, int]:
    name, _, nth = value.partition(":")
    if name not in CRASH_POINTS:
        raise InvalidInput(
            f"ZINCIR_CRASH_AT names an unknown crash point {name!r}; known: "
            f"{', '.join(CRASH_POINTS)}"
        )
    try:
        count = int(nth) if nth else 1
    except ValueError:
        count = 0
    if count < 1:
        raise InvalidInput(f"ZINCIR_CRASH_AT {value!r}: the hit number must be an integer ≥ 1")
    return name, count


_target: tuple[str, int] | None = None
_hits: dict[str, int] | None = None


def crash_point(name: str) -> None:
    """Mark a crash boundary: a no-op unless a test armed this point (then SIGKILL here)."""
    if _hits is None:
        return
    count = _hits[name] = _hits.get(name, 0) + 1
    if _target is not None and _target == (name, count):
        os.kill(os.getpid(), signal.SIGKILL)


def arm(name: str, nth: int = 1) -> None:
    """Kill this process on the ``nth`` hit of point ``name`` (counting from now)."""
    global _target, _hits
    _target = _parse(f"{name}:{nth}")
    _hits = {}


def count() -> None:
    """Count every point's hits from now on, killing nowhere (see :func:`census`)."""
    global _target, _hits
    _target, _hits = None, {}


def disarm() -> None:
    """Make every crash point a no-op again."""
    global _target, _hits
    _target, _hits = None, None


def census() -> dict[str, int]:
    """How often each point was hit since it was armed (empty when unarmed)."""
    return dict(_hits or {})


def _from_environment() -> None:
    global _target, _hits
    armed = os.environ.get("ZINCIR_CRASH_AT")
    if armed:
        _target, _hits = _parse(armed), {}
    path = os.environ.get("ZINCIR_CRASH_CENSUS")
    if path:
        if _hits is None:
            _hits = {}

        def write() -> None:
            with open(path, "w", encoding="utf-8") as out:
                json.dump(census(), out)

        atexit.register(write)


_from_environment()
