"""What every workflow primitive shares: the run's lease, the store, and the durable wait loop.

Every write is a named store operation taking the lease, fenced inside its own transaction,
so a fenced owner's write is rejected with nothing stored. Waits (sleep, recv, join) are
recorded on the run by their attempt's transaction, so that a ResumeWorker does not claim
the run before the wait is satisfied, even if this process dies while waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .. import _telemetry as telemetry
from .._errors import FencedOut, InvalidInput, RunTerminal, WorkflowSuspended
from ..runs._context import AgentContext
from ..store import Lease, Store, WaitAttempt

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["Core", "Sleeper", "WaitKind", "WorkflowSuspended", "default_sleeper"]

log = logging.getLogger("zincir.workflow")

_MIN_WAIT = 0.001  # seconds between two attempts of a wait that is due

T = TypeVar("T")
Sleeper = Callable[[float], Awaitable[Any]]
WaitKind = Literal["timer", "message", "child"]


class Core:
    """What the workflow primitives share: the run's lease, its store and how to wait."""

    def __init__(
        self, agent: AgentContext, *, sleeper: Sleeper, poll_interval: float, suspend_waits: bool
    ) -> None:
        self.agent = agent
        self.store: Store = agent.store
        # One lease covers the AgentContext and the workflow API (see WorkflowContext).
        self.lease: Lease = agent.lease
        self.sleeper = sleeper
        self.poll_interval = poll_interval
        self.suspend_waits = suspend_waits
        self._counters: dict[tuple[str, ...], int] = {}
        self.claimed_ahead: str | None = None
        """The step this context claimed with the previous step's result, until it runs."""
        agent.before_release(self.release_ahead)  # whoever gives the lease up
        self.attempt: telemetry.RunAttempt | None = None
        """The span of this attempt at the run, from its first step body that runs."""
        agent.before_release(self.end_attempt)

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

    async def drop_claim(self, name: str) -> None:
        """Drop this context's claim on step ``name`` (its body failed, or it was claimed
        ahead and not run next), so the step can run later.

        Fenced: a context that lost the lease leaves its claim to the new owner's recover().
        """
        try:
            await self.store.abandon_step(self.lease, name)
        except (FencedOut, RunTerminal):
            pass
        except Exception as error:  # the caller's own error matters more; a retry re-claims
            log.warning(
                "[run %s] could not release the claim on step %r: %s", self.run_id, name, error
            )

    async def attempt_context(self) -> Context | None:
        """The tracing context of this attempt at the run (started on first use; None
        without OpenTelemetry)."""
        if self.attempt is None:
            self.attempt = await telemetry.start_run(
                self.store, self.run_id, "zincir workflow", {}, current=False
            )
        return self.attempt.context()

    async def end_attempt(self) -> None:
        """End this attempt's span as the context gives its lease up."""
        if self.attempt is not None:
            self.attempt.end()

    async def release_ahead(self) -> None:
        """Release the claim made ahead for a step the code did not run next: never run."""
        name, self.claimed_ahead = self.claimed_ahead, None
        if name is not None:
            await self.drop_claim(name)

    async def block(
        self,
        kind: WaitKind,
        ref: str,
        attempt: Callable[[], Awaitable[WaitAttempt[T]]],
        ready: Callable[[], Awaitable[bool]] | None,
    ) -> T:
        """Resolve a wait: try ``attempt`` (a fenced write), then wait and retry.

        ``attempt`` either resolves the wait or records it on the run and returns its
        deadline. Between attempts this waits until the deadline (timers) or polls the
        cheap read ``ready`` every ``poll_interval``; in ``suspend_waits`` mode it raises
        :class:`WorkflowSuspended` instead of waiting in this process.
        """
        self.check()
        tried = await attempt()
        if not tried.done:  # this process may wait long: no claim ahead is held meanwhile
            await self.release_ahead()
        while not tried.done:
            if self.suspend_waits:
                raise WorkflowSuspended(self.run_id, kind, ref, tried.deadline)
            self.check()
            until = tried.deadline
            delay = self.poll_interval if ready is not None else None
            if until is not None:
                remaining = max((until - self.now()).total_seconds(), 0.0)
                delay = remaining if delay is None else min(delay, remaining)
            if delay is None:  # nothing to poll and no deadline: a programming error
                raise InvalidInput(
                    f"a {kind} wait needs a deadline or a condition", run_id=self.run_id
                )
            # A store judging time by its server may see the deadline a moment after this
            # process does: never spin on a zero delay.
            delay = max(delay, _MIN_WAIT)
            if ready is not None and self.sleeper is default_sleeper:
                # A message or a child may arrive before the next poll: a store that can tell
                # (PostgreSQL's LISTEN/NOTIFY) ends the wait early.
                await self.store.wait_for_wake(self.run_id, delay)
            else:
                await self.sleeper(delay)
            due = until is not None and self.now() >= until
            if due or (ready is not None and await ready()):
                self.check()
                tried = await attempt()
        return tried.value


async def default_sleeper(seconds: float) -> None:
    """Wait in this process (``asyncio.sleep``); tests inject a fake that moves a fake clock."""
    await asyncio.sleep(seconds)
