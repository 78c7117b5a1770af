"""The lease-bound write path and the durable wait loop shared by every workflow primitive.

Every write goes through :meth:`Core.write`, whose transaction function calls
:meth:`Core.fence` (``fenced_append``) so that a fenced owner's write is rejected with
nothing stored. Waits (sleep, recv, join) record what the run is blocked on in
``agent_runs.wait_*`` so that a ResumeWorker does not claim the run before the wait is
satisfied, even if this process dies while waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any, Literal, TypeVar

import apsw

from .._errors import InvalidInput, WorkflowSuspended
from .._time import to_db
from ..runs._context import AgentContext
from ..runs._lease import Lease, NewEvent, check_fence, fenced_append
from ..store import SQLiteStore

__all__ = ["Core", "Sleeper", "WaitKind", "WorkflowSuspended", "check_name"]

T = TypeVar("T")
Sleeper = Callable[[float], Awaitable[Any]]
WaitKind = Literal["timer", "message", "child"]
# (done, value, deadline): one attempt to resolve a wait inside a fenced transaction.
Attempt = tuple[bool, T, datetime | None]


def check_name(value: object, what: str, run_id: str) -> str:
    """Step, timer, topic and spawn names: non-empty text of at most 256 bytes."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string, not {value!r}", run_id=run_id)
    if len(value.encode("utf-8", "surrogatepass")) > 256:
        raise InvalidInput(f"{what} must be at most 256 bytes: {value[:40]!r}…", run_id=run_id)
    return value


def set_wait(conn: apsw.Connection, run_id: str, kind: WaitKind, ref: str,
             until: datetime | None) -> None:
    """Record what the run is blocked on (one wait per run: the latest one wins)."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = ?, wait_ref = ?, wait_until = ? WHERE id = ?",
        (kind, ref, None if until is None else to_db(until), run_id),
    )


def clear_wait(conn: apsw.Connection, run_id: str, kind: WaitKind, ref: str) -> None:
    """Forget the run's wait if it is still this one."""
    conn.execute(
        "UPDATE agent_runs SET wait_kind = NULL, wait_ref = NULL, wait_until = NULL "
        "WHERE id = ? AND wait_kind = ? AND wait_ref = ?",
        (run_id, kind, ref),
    )


class Core:
    """What the workflow primitives share: the run's lease, its clock and how to wait."""

    def __init__(self, agent: AgentContext, *, sleeper: Sleeper, poll_interval: float,
                 suspend_waits: bool) -> None:
        self.agent = agent
        self.store: SQLiteStore = agent.store
        # One lease covers the AgentContext and the workflow API (see WorkflowContext).
        self.lease: Lease = agent.lease
        self.sleeper = sleeper
        self.poll_interval = poll_interval
        self.suspend_waits = suspend_waits
        self._counters: dict[tuple[str, ...], int] = {}

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    def now(self) -> datetime:
        return self.store.clock()

    def next_count(self, *key: str) -> int:
        """Deterministic per-context counter (1, 2, …) used to key sends and receives."""
        count = self._counters.get(key, 0) + 1
        self._counters[key] = count
        return count

    def check(self) -> None:
        """Raise LeaseLost if the shared heartbeat failed; called before every write."""
        self.agent.check_lease()

    def check_fence(self, conn: apsw.Connection) -> None:
        """Check the lease inside the transaction without writing to the run's row."""
        check_fence(conn, self.lease)

    def fence(self, conn: apsw.Connection, now: datetime, events: Iterable[NewEvent] = ()) -> int:
        """Check the lease inside the transaction, extend it and append ``events``."""
        return fenced_append(conn, self.lease, now, events)

    async def write(
        self, fn: Callable[[apsw.Connection, datetime], T], *, durable: bool = True
    ) -> T:
        """Run ``fn(conn, now)`` in one write transaction; ``fn`` must call :meth:`fence`."""
        self.check()
        clock = self.store.clock
        return await self.store.write(lambda conn: fn(conn, clock()), durable=durable)

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        return await self.store.read(fn)

    async def block(
        self,
        kind: WaitKind,
        ref: str,
        attempt: Callable[[apsw.Connection, datetime], Attempt[T]],
        ready: Callable[[apsw.Connection], bool] | None,
    ) -> T:
        """Resolve a wait: try ``attempt`` (a fenced write), then wait and retry.

        ``attempt`` either resolves the wait or records it (``set_wait``) and returns the
        deadline. Between attempts this waits until the deadline (timers) or polls the cheap
        read ``ready`` every ``poll_interval``; in ``suspend_waits`` mode it raises
        :class:`WorkflowSuspended` instead of waiting in this process.
        """
        done, value, until = await self.write(attempt)
        while not done:
            if self.suspend_waits:
                raise WorkflowSuspended(self.run_id, kind, ref, until)
            self.check()
            delay = self.poll_interval if ready is not None else None
            if until is not None:
                remaining = max((until - self.now()).total_seconds(), 0.0)
                delay = remaining if delay is None else min(delay, remaining)
            if delay is None:  # nothing to poll and no deadline: a programming error
                raise InvalidInput(f"a {kind} wait needs a deadline or a condition",
                                   run_id=self.run_id)
            await self.sleeper(delay)
            due = until is not None and self.now() >= until
            if due or (ready is not None and await self.read(ready)):
                done, value, until = await self.write(attempt)
        return value


async def default_sleeper(seconds: float) -> None:
    """Wait in this process (``asyncio.sleep``); tests inject a fake that moves a fake clock."""
    await asyncio.sleep(seconds)
