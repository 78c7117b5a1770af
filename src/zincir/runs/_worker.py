"""ResumeWorker: claims abandoned or waiting runs and hands them to the application.

A run is claimable when it is not terminal, its lease is absent or expired (or held by a
process of this machine that provably died: claimed at once), its backoff
(``next_attempt_at``) has passed and its workflow wait, if any, is satisfied (deadline
passed, message arrived, child terminal). A claim is one conditional UPDATE inside one
``BEGIN IMMEDIATE`` transaction that bumps the fencing token, so racing workers never claim
the same run twice and never take a live lease. Claims are batched: one SELECT and one
UPDATE … RETURNING per batch.

Attempts: every claim increments ``agent_runs.attempts`` and sets ``next_attempt_at`` to
claim time + backoff, so a crashed attempt is retried no sooner than its lease expiry and
its backoff. A handler error records ``last_error`` and an ``attempt_failed`` event and
backs off; after ``max_attempts`` the run is marked ``failed`` with the last error. A
handler that leaves the run waiting (a workflow wait) resets the count: waiting is progress.

Queues: :meth:`ResumeWorker.enqueue` stores a run waiting in a ``zincir.Queue``; every
claim first admits the waiting runs the worker serves (its ``names``; without names, any
run's), within their queues' stored limits, in the claim's transaction, so any number of
worker processes together never exceed a queue's concurrency, globally or per key.

Versions: a worker has an ``app_version`` (default ``$ZINCIR_APP_VERSION``). Unpinned (the
default) it claims runs of every version, and unversioned ones. Pinned (:meth:`pin_version`)
it claims only runs of its own version, and runs of a version that its registered
migrations (:meth:`migrate_with`) move to its own; a run no live worker serves stays
claimable, waiting for one that does. Unversioned runs are claimed by unpinned workers only.
A claimed run of an older version with a migration chain to the worker's is migrated before
the handler runs (see ``zincir.runs._versions``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, Self

from .._crash import crash_point
from .._errors import InvalidInput, ZincirSignal
from .._json import dumps
from .._validate import (
    DEFAULT_POLL_INTERVAL,
    check_count,
    check_duration,
    check_id,
    check_lease_ttl,
    check_positive_duration,
    printable,
)
from ..durable import RetryPolicy
from ..store import Lease, Store, new_owner_id
from ._context import DEFAULT_LEASE_TTL, AgentContext
from ._queue import Queue, store_queued
from ._versions import VersionMigrations, app_version_or_default

__all__ = ["Handler", "ResumeWorker"]

log = logging.getLogger("zincir.worker")

Handler = Callable[[AgentContext], Awaitable[None]]


def _names(names: Iterable[str] | None) -> tuple[str, ...] | None:
    """The run names a worker serves, checked (None: every run)."""
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise InvalidInput(f"names must be a list of run names, not {names!r}")
    listed = tuple(dict.fromkeys(names))
    for name in listed:
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"names must be non-empty strings, not {name!r}")
    return listed


class ResumeWorker:
    """Polls for claimable runs and runs ``handler(ctx)`` on each, a bounded number at a time.

    With ``names`` it claims only runs with one of those names (a worker serving some agents).
    Runs waiting in a queue (:meth:`enqueue`) are started within the queue's limits.
    """

    def __init__(
        self,
        store: Store,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        *,
        max_attempts: int | None = None,
        app_version: str | None = None,
        names: Iterable[str] | None = None,
    ) -> None:
        self.store = store
        self.names = _names(names)  # only runs with one of these names (None: any run)
        self.lease_ttl = check_lease_ttl(lease_ttl)
        self.owner = new_owner_id()
        self.app_version = app_version_or_default(app_version)  # the code's version
        self._pinned = False
        self._migrations: VersionMigrations | None = None
        self._poll_interval = DEFAULT_POLL_INTERVAL.total_seconds()
        self._max_concurrency = 10
        self._max_attempts: int | None = None
        self._backoff = RetryPolicy(
            initial_interval=timedelta(seconds=1), backoff=2.0, max_interval=timedelta(minutes=5)
        )
        self.max_attempts(max_attempts)

    # -- configuration (chainable) -----------------------------------------------------

    def poll_interval(self, interval: timedelta | float) -> Self:
        """How long to wait between polls when there is nothing to claim (default 200 ms)."""
        self._poll_interval = check_positive_duration(interval, "poll_interval").total_seconds()
        return self

    def max_concurrency(self, limit: int) -> Self:
        """At most ``limit`` handlers run at once (default 10); claims never exceed free slots."""
        self._max_concurrency = check_count(limit, "max_concurrency", maximum=100_000)
        return self

    def max_attempts(self, limit: int | None) -> Self:
        """Mark a run failed once ``limit`` attempts did not finish it (None: retry forever)."""
        self._max_attempts = None if limit is None else check_count(limit, "max_attempts")
        return self

    def backoff(
        self,
        initial: timedelta | float,
        *,
        factor: float = 2.0,
        maximum: timedelta | float = timedelta(minutes=5),
    ) -> Self:
        """Wait ``initial * factor**(attempt-1)`` (capped at ``maximum``) before a retry."""
        first = check_duration(initial, "initial backoff")
        cap = check_duration(maximum, "maximum backoff")
        if cap < first:
            raise InvalidInput("backoff needs 0 <= initial <= maximum")
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 1 <= factor <= 1000
        ):
            raise InvalidInput(f"backoff factor must be a number in 1..1000, not {factor!r}")
        self._backoff = RetryPolicy(initial_interval=first, backoff=factor, max_interval=cap)
        return self

    def pin_version(self, pinned: bool = True) -> Self:
        """Claim only runs of this worker's ``app_version`` (and those its migrations move
        to it); runs of other versions, and unversioned ones, wait for a worker that serves
        them. Needs an ``app_version``."""
        if pinned and self.app_version is None:
            raise InvalidInput(
                "pin_version() needs the worker's version: ResumeWorker(..., app_version=...) "
                "or $ZINCIR_APP_VERSION"
            )
        self._pinned = bool(pinned)
        return self

    def migrate_with(self, migrations: VersionMigrations | None) -> Self:
        """Move each claimed run of an older version along ``migrations`` to this worker's
        version before the handler runs (a pinned worker also claims those runs)."""
        if migrations is not None and not isinstance(migrations, VersionMigrations):
            raise InvalidInput(
                f"migrations must be a VersionMigrations, not {type(migrations).__name__}"
            )
        if migrations is not None and self.app_version is None:
            raise InvalidInput(
                "migrate_with() needs the worker's version: ResumeWorker(..., app_version=...) "
                "or $ZINCIR_APP_VERSION"
            )
        self._migrations = migrations
        return self

    def served_versions(self) -> list[str] | None:
        """The versions a pinned worker claims (its own first); None: every run."""
        if not self._pinned or self.app_version is None:
            return None
        sources = [] if self._migrations is None else self._migrations.sources(self.app_version)
        return [self.app_version, *sources]

    def delay(self, attempt: int) -> timedelta:
        """The backoff after attempt number ``attempt`` (1-based)."""
        return self._backoff.delay(attempt)

    # -- queueing ---------------------------------------------------------------------

    async def enqueue(
        self,
        name: str,
        config: Any = None,
        *,
        queue: Queue,
        key: str | None = None,
        priority: int = 0,
        run_id: str | None = None,
        dedupe_id: str | None = None,
    ) -> str:
        """Store a run named ``name`` waiting in ``queue`` (its handler reads ``config`` as
        ``(await ctx.state()).config``); its id. Every ResumeWorker serving ``name`` starts it
        within the queue's limits, higher ``priority`` first, then older; a ``dedupe_id``
        already used in that queue returns that run's id."""
        chosen = str(uuid.uuid4()) if run_id is None else check_id(run_id, "a run id")
        check_id(name, "a run name", run_id=chosen)
        config_json = dumps({} if config is None else config, what="config", run_id=chosen)
        return await store_queued(
            self.store,
            chosen,
            queue,
            name=name,
            config_json=config_json,
            key=key,
            priority=priority,
            dedupe_id=dedupe_id,
        )

    # -- claiming ---------------------------------------------------------------------

    async def claim(self, limit: int) -> list[Lease]:
        """Claim up to ``limit`` runs in one transaction; the caller owns the returned leases.

        Queued runs it serves are admitted first, within their queues' limits, in the same
        transaction. Runs that already used ``max_attempts`` attempts are marked failed
        instead. Low-level: :meth:`run` and :meth:`run_once` adopt each lease into an
        AgentContext.
        """
        limit = check_count(limit, "limit", minimum=0, maximum=100_000)
        if limit < 1:
            return []
        leases = await self.store.claim_queued_runs(
            self.owner,
            self.lease_ttl,
            limit,
            max_attempts=self._max_attempts,
            backoff=self.delay,
            app_versions=self.served_versions(),
            names=self.names,
        )
        for lease in leases:
            log.info("[run %s] claimed (lease token %d)", lease.run_id, lease.token)
        if leases:
            crash_point("worker.claimed")
        return leases

    # -- dispatching ------------------------------------------------------------------

    async def run_once(self, handler: Handler) -> int:
        """Claim up to ``max_concurrency`` runs, run their handlers, wait for them; return count."""
        leases = await self.claim(self._max_concurrency)
        await asyncio.gather(*(self._dispatch(handler, lease) for lease in leases))
        return len(leases)

    async def run(self, handler: Handler, shutdown: Awaitable[Any]) -> None:
        """Claim and dispatch until ``shutdown`` completes, then wait for in-flight handlers."""
        if not callable(handler):
            if inspect.iscoroutine(shutdown):
                shutdown.close()  # never started: do not leave it un-awaited
            raise InvalidInput(f"handler must be an async callable, not {handler!r}")
        stop: asyncio.Future[Any] = asyncio.ensure_future(shutdown)
        running: set[asyncio.Task[None]] = set()
        try:
            while not stop.done():
                free = self._max_concurrency - len(running)
                if free > 0:
                    try:
                        leases = await self.claim(free)
                    except Exception as error:  # a busy or broken store: retry next poll
                        log.error("claiming runs failed: %s", error)
                        leases = []
                    for lease in leases:
                        running.add(asyncio.ensure_future(self._dispatch(handler, lease)))
                # Wake on shutdown, on a finished handler (a free slot), on a store's notice
                # that a run may have become claimable, or after one interval.
                wake = asyncio.ensure_future(self.store.wait_for_wake(None, self._poll_interval))
                try:
                    await asyncio.wait(
                        {stop, wake, *running},
                        timeout=self._poll_interval,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    wake.cancel()
                running = {task for task in running if not task.done()}
            if running:
                await asyncio.wait(running)
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
            raise
        finally:
            if not stop.done():
                stop.cancel()
            elif not stop.cancelled() and stop.exception() is not None:
                log.warning("the shutdown awaitable raised: %r", stop.exception())

    async def _dispatch(self, handler: Handler, lease: Lease) -> None:
        """Run one handler on an adopted context, then settle the attempt and free the lease."""
        ctx = AgentContext.adopt(self.store, lease)
        error: str | None = None
        try:
            await self._migrate(ctx)
            outcome = handler(ctx)
            if inspect.isawaitable(outcome):
                await outcome
        except ZincirSignal:
            pass  # a suspension (e.g. WorkflowSuspended): the run waits; not an error
        except asyncio.CancelledError:
            await self._release(ctx)
            raise
        except Exception as failure:
            error = printable(f"{type(failure).__name__}: {failure}")
            log.warning("[run %s] handler failed: %s", lease.run_id, error)
        try:
            await self._settle(lease, error)
        except Exception as failure:
            log.error("[run %s] could not record the attempt's end: %s", lease.run_id, failure)
        await self._release(ctx)

    async def _migrate(self, ctx: AgentContext) -> None:
        """Move a claimed run of an older version to this worker's, when a chain of
        registered migrations does; any other run is left as it is."""
        if self._migrations is None or self.app_version is None:
            return
        run = await self.store.get_run(ctx.run_id)
        version = None if run is None else run["app_version"]
        if version is None or version == self.app_version:
            return
        if self._migrations.chain(version, self.app_version) is None:
            return  # unpinned: the handler runs it as it is (patched() branches)
        steps = await self._migrations.migrate(ctx, version, self.app_version)
        log.info(
            "[run %s] migrated from version %s to %s (%d step(s))",
            ctx.run_id,
            version,
            self.app_version,
            steps,
        )

    async def _release(self, ctx: AgentContext) -> None:
        try:
            await ctx.release()
        except Exception as failure:
            log.warning("[run %s] could not release the lease: %s", ctx.run_id, failure)

    async def _settle(self, lease: Lease, error: str | None) -> None:
        """Record how an attempt ended, fenced by its token (the handler may have closed)."""
        if error is None and await self.store.run_is_finished(lease.run_id):
            return  # the handler completed (or failed) the run: nothing to record
        await self.store.settle_attempt(
            lease, error, max_attempts=self._max_attempts, backoff=self.delay
        )
