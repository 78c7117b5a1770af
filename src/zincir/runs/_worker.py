"""ResumeWorker: claims abandoned or waiting runs and hands them to the application (SPEC §5).

A run is claimable when it is not terminal, its lease is absent or expired, its backoff
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
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Self

import apsw

from .._errors import InvalidInput, ZincirSignal
from .._json import dumps
from .._time import as_timedelta, to_db
from ..store import TERMINAL_STATUSES, SQLiteStore
from ._context import DEFAULT_LEASE_TTL, AgentContext
from ._lease import Lease, new_owner_id, validate_ttl

__all__ = ["CLAIMABLE_SQL", "Handler", "ResumeWorker"]

log = logging.getLogger("zincir.worker")

Handler = Callable[[AgentContext], Awaitable[None]]

CLAIMABLE_SQL = """
r.status IN ('pending', 'running')
AND (r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at <= :now)
AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= :now)
AND (r.wait_kind IS NULL
     OR (r.wait_until IS NOT NULL AND r.wait_until <= :now)
     OR (r.wait_kind = 'message' AND EXISTS (
         SELECT 1 FROM messages AS m
         WHERE m.to_run_id = r.id AND m.topic = r.wait_ref AND m.received_at IS NULL))
     OR (r.wait_kind = 'child' AND EXISTS (
         SELECT 1 FROM agent_runs AS c
         WHERE c.id = r.wait_ref AND c.status IN ('completed', 'failed', 'cancelled'))))
"""


def _append(conn: apsw.Connection, run_id: str, now: str, events: list[tuple[str, Any]]) -> None:
    """Append events to a run whose fence the caller has just checked in this transaction."""
    row = conn.execute(
        "UPDATE agent_runs SET last_seq = last_seq + ? WHERE id = ? RETURNING last_seq",
        (len(events), run_id),
    ).fetchone()
    assert row is not None
    first = int(row[0]) - len(events) + 1
    conn.executemany(
        "INSERT INTO events (run_id, seq, type, payload, created_at) VALUES (?, ?, ?, ?, ?)",
        [(run_id, first + i, kind, dumps(body), now) for i, (kind, body) in enumerate(events)],
    )


class ResumeWorker:
    """Polls for claimable runs and runs ``handler(ctx)`` on each, a bounded number at a time."""

    def __init__(self, store: SQLiteStore, lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
                 *, max_attempts: int | None = None) -> None:
        self.store = store
        self.lease_ttl = validate_ttl(lease_ttl)
        self.owner = new_owner_id()
        self._poll_interval = 1.0
        self._max_concurrency = 10
        self._max_attempts: int | None = None
        self._backoff_initial = timedelta(seconds=1)
        self._backoff_factor = 2.0
        self._backoff_max = timedelta(minutes=5)
        self.max_attempts(max_attempts)

    # -- configuration (chainable) -----------------------------------------------------

    def poll_interval(self, interval: timedelta | float) -> Self:
        """How long to wait between polls when there is nothing to claim (default 1 s)."""
        seconds = as_timedelta(interval, name="poll_interval").total_seconds()
        if seconds <= 0:
            raise InvalidInput(f"poll_interval must be positive, not {seconds:g} s")
        self._poll_interval = seconds
        return self

    def max_concurrency(self, limit: int) -> Self:
        """At most ``limit`` handlers run at once (default 10); claims never exceed free slots."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput(f"max_concurrency must be a positive int, not {limit!r}")
        self._max_concurrency = limit
        return self

    def max_attempts(self, limit: int | None) -> Self:
        """Mark a run failed once ``limit`` attempts did not finish it (None: retry forever)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise InvalidInput(f"max_attempts must be a positive int or None, not {limit!r}")
        self._max_attempts = limit
        return self

    def backoff(self, initial: timedelta | float, *, factor: float = 2.0,
                maximum: timedelta | float = timedelta(minutes=5)) -> Self:
        """Wait ``initial * factor**(attempt-1)`` (capped at ``maximum``) before a retry."""
        first = as_timedelta(initial, name="initial backoff")
        cap = as_timedelta(maximum, name="maximum backoff")
        if first < timedelta(0) or cap < first:
            raise InvalidInput("backoff needs 0 <= initial <= maximum")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or factor < 1:
            raise InvalidInput(f"backoff factor must be a number >= 1, not {factor!r}")
        self._backoff_initial, self._backoff_factor, self._backoff_max = first, factor, cap
        return self

    def delay(self, attempt: int) -> timedelta:
        """The backoff after attempt number ``attempt`` (1-based)."""
        seconds = self._backoff_initial.total_seconds() * self._backoff_factor ** max(
            attempt - 1, 0)
        return min(timedelta(seconds=min(seconds, 1e9)), self._backoff_max)

    # -- claiming ---------------------------------------------------------------------

    async def claim(self, limit: int) -> list[Lease]:
        """Claim up to ``limit`` runs in one transaction; the caller owns the returned leases.

        Runs that already used ``max_attempts`` attempts are marked failed instead.
        Low-level: :meth:`run` and :meth:`run_once` adopt each lease into an AgentContext.
        """
        if limit < 1:
            return []
        clock, owner, ttl, cap = self.store.clock, self.owner, self.lease_ttl, self._max_attempts

        def write(conn: apsw.Connection) -> list[Lease]:
            now = clock()
            stamp = to_db(now)
            rows = [
                (str(run_id), str(status), int(attempts), last_error)
                for run_id, status, attempts, last_error in conn.execute(
                    f"SELECT r.id, r.status, r.attempts, r.last_error FROM agent_runs AS r "
                    f"WHERE {CLAIMABLE_SQL} ORDER BY r.updated_at, r.id LIMIT :limit",
                    {"now": stamp, "limit": limit},
                )
            ]
            if not rows:
                return []
            spent = [row for row in rows if cap is not None and row[2] >= cap]
            if spent:
                self._give_up(conn, stamp, spent)
            wanted = [row[0] for row in rows if cap is None or row[2] < cap]
            if not wanted:
                return []
            claimed = [
                (str(run_id), int(token), int(attempt), int(last_seq))
                for run_id, token, attempt, last_seq in conn.execute(
                    "UPDATE agent_runs SET lease_owner = :owner, "
                    "lease_token = lease_token + 1, lease_expires_at = :expires, "
                    "attempts = attempts + 1, status = 'running', wait_kind = NULL, "
                    "wait_ref = NULL, wait_until = NULL, updated_at = :now, "
                    "last_seq = last_seq + CASE status WHEN 'pending' THEN 2 ELSE 1 END "
                    "WHERE id IN (SELECT value FROM json_each(:ids)) "
                    "RETURNING id, lease_token, attempts, last_seq",
                    {"owner": owner, "expires": to_db(now + ttl), "now": stamp,
                     "ids": dumps(wanted)},
                )
            ]
            pending = {row[0] for row in rows if row[1] == "pending"}
            events: list[tuple[str, int, str, str, str]] = []
            retry_at: list[tuple[str, str]] = []
            for run_id, token, attempt, last_seq in claimed:
                if run_id in pending:
                    events.append((run_id, last_seq - 1, "state_transition",
                                   dumps({"from": "pending", "to": "running"}), stamp))
                events.append((run_id, last_seq, "run_claimed",
                               dumps({"worker": owner, "attempt": attempt,
                                      "lease_token": token}), stamp))
                retry_at.append((to_db(now + self.delay(attempt)), run_id))
            conn.executemany(
                "INSERT INTO events (run_id, seq, type, payload, created_at) "
                "VALUES (?, ?, ?, ?, ?)", events)
            conn.executemany("UPDATE agent_runs SET next_attempt_at = ? WHERE id = ?", retry_at)
            return [Lease(run_id, owner, token, ttl) for run_id, token, _, _ in claimed]

        leases = await self.store.write(write)
        for lease in leases:
            log.info("[run %s] claimed (lease token %d)", lease.run_id, lease.token)
        return leases

    def _give_up(self, conn: apsw.Connection, stamp: str,
                 spent: list[tuple[str, str, int, Any]]) -> None:
        """Mark runs failed whose attempts are used up, fencing any late owner."""
        for run_id, status, attempts, last_error in spent:
            error = last_error or (
                f"attempt {attempts} ended without completing the run (crashed or returned)")
            conn.execute(
                "UPDATE agent_runs SET status = 'failed', last_error = ?, lease_owner = NULL, "
                "lease_expires_at = NULL, lease_token = lease_token + 1, wait_kind = NULL, "
                "wait_ref = NULL, wait_until = NULL, updated_at = ? WHERE id = ?",
                (error, stamp, run_id),
            )
            _append(conn, run_id, stamp, [("state_transition", {
                "from": status, "to": "failed", "error": error, "attempts": attempts})])
            log.warning("[run %s] failed after %d attempts: %s", run_id, attempts, error)

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
                # Wake on shutdown, on a finished handler (a free slot) or after one interval.
                await asyncio.wait({stop, *running}, timeout=self._poll_interval,
                                   return_when=asyncio.FIRST_COMPLETED)
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
            outcome = handler(ctx)
            if inspect.isawaitable(outcome):
                await outcome
        except ZincirSignal:
            pass  # a suspension (e.g. WorkflowSuspended): the run waits; not an error
        except asyncio.CancelledError:
            await self._release(ctx)
            raise
        except Exception as failure:
            error = f"{type(failure).__name__}: {failure}"
            log.warning("[run %s] handler failed: %s", lease.run_id, error)
        try:
            await self._settle(lease, error)
        except Exception as failure:
            log.error("[run %s] could not record the attempt's end: %s", lease.run_id, failure)
        await self._release(ctx)

    async def _release(self, ctx: AgentContext) -> None:
        try:
            await ctx.release()
        except Exception as failure:
            log.warning("[run %s] could not release the lease: %s", ctx.run_id, failure)

    async def _settle(self, lease: Lease, error: str | None) -> None:
        """Record how an attempt ended, fenced by its token (the handler may have closed)."""
        clock, cap = self.store.clock, self._max_attempts

        def finished(conn: apsw.Connection) -> bool:
            row = conn.execute("SELECT status FROM agent_runs WHERE id = ?",
                               (lease.run_id,)).fetchone()
            return row is None or row[0] in TERMINAL_STATUSES

        if error is None and await self.store.read(finished):
            return  # the handler completed (or failed) the run: nothing to record

        def write(conn: apsw.Connection) -> None:
            now: datetime = clock()
            stamp = to_db(now)
            row = conn.execute(
                "SELECT status, attempts, wait_kind FROM agent_runs WHERE id = ? "
                "AND lease_token = ? AND (lease_owner IS NULL OR lease_owner = ?)",
                (lease.run_id, lease.token, lease.owner),
            ).fetchone()
            if row is None or row[0] in TERMINAL_STATUSES:
                return  # completed or failed by the handler, or taken over since
            status, attempts, waiting = row
            if error is None:
                if waiting is not None:  # left waiting on a timer, message or child
                    conn.execute(
                        "UPDATE agent_runs SET attempts = 0, next_attempt_at = NULL, "
                        "updated_at = ? WHERE id = ?", (stamp, lease.run_id))
                else:
                    conn.execute(
                        "UPDATE agent_runs SET next_attempt_at = ?, updated_at = ? WHERE id = ?",
                        (to_db(now + self.delay(attempts)), stamp, lease.run_id))
                return
            if cap is not None and attempts >= cap:
                conn.execute(
                    "UPDATE agent_runs SET status = 'failed', last_error = ?, lease_owner = NULL, "
                    "lease_expires_at = NULL, wait_kind = NULL, wait_ref = NULL, "
                    "wait_until = NULL, updated_at = ? WHERE id = ?",
                    (error, stamp, lease.run_id))
                _append(conn, lease.run_id, stamp, [("state_transition", {
                    "from": status, "to": "failed", "error": error, "attempts": attempts})])
                log.warning("[run %s] failed after %d attempts: %s", lease.run_id, attempts,
                            error)
                return
            retry = now + self.delay(attempts)
            conn.execute(
                "UPDATE agent_runs SET last_error = ?, next_attempt_at = ?, updated_at = ? "
                "WHERE id = ?", (error, to_db(retry), stamp, lease.run_id))
            _append(conn, lease.run_id, stamp, [("attempt_failed", {
                "attempt": attempts, "error": error, "retry_at": to_db(retry)})])

        await self.store.write(write)
