"""Claims of abandoned or waiting runs (the ResumeWorker) and how an attempt ended.

A run is claimable when it is not terminal, its lease is absent or expired (or held by a
process of this machine that provably died), its backoff (``next_attempt_at``) has passed
and its workflow wait, if any, is satisfied, all judged by the store's clock
(``zincir_now()``). A claim bumps the fencing token in the transaction that found the run
claimable, so racing workers never claim one run twice and never take a live lease: SQLite
runs one writer; PostgreSQL locks the claimable rows ``FOR NO KEY UPDATE SKIP LOCKED``, so
workers on several machines take disjoint runs, pass over a row another transaction holds
(a claim in flight, a live owner's write), and judge a locked row again once they hold it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta
from functools import cache
from typing import Final

from .._time import to_db
from ._log import append_checked
from ._owner import gone_owners, this_machine_like
from ._records import TERMINAL_STATUSES, Lease, NewEvent
from ._run_rules import attempt_error, attempt_failed, attempts_spent, claim_events, transition
from ._sql import Rules, Sql, Tx, micros, sql

__all__ = ["CLAIMABLE", "ClaimOps"]

Backoff = Callable[[int], timedelta]

CLAIMABLE: Final = """
r.status IN ('pending', 'running')
AND (r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR {lease_expiry:r} <= zincir_now(){gone})
AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= zincir_now())
AND (r.wait_kind IS NULL
     OR (r.wait_until IS NOT NULL AND r.wait_until <= zincir_now())
     OR (r.wait_kind = 'message' AND EXISTS (
         SELECT 1 FROM messages AS m
         WHERE m.to_run_id = r.id AND m.topic = r.wait_ref AND m.received_at IS NULL))
     OR (r.wait_kind = 'child' AND EXISTS (
         SELECT 1 FROM agent_runs AS c
         WHERE c.id = r.wait_ref AND c.status IN ('completed', 'failed', 'cancelled'))))
"""
"""Whether run ``r`` may be claimed now (``{gone}``: where a live lease of an owner that
provably died counts as lapsed)."""

_THIS_MACHINE: Final = sql(
    "SELECT DISTINCT lease_owner FROM agent_runs "
    "WHERE status IN ('pending', 'running') AND lease_owner LIKE ?"
)
"""The owners of this machine holding leases of unfinished runs (judged one by one)."""
_CLAIM: Final = sql(
    "UPDATE agent_runs SET lease_owner = ?, lease_token = lease_token + 1, "
    "lease_expires_at = {now_plus}, lease_ttl_us = ?, attempts = attempts + 1, "
    "status = 'running', wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    "updated_at = zincir_now(), "
    "last_seq = {last_seq} + CASE status WHEN 'pending' THEN 2 ELSE 1 END "
    "WHERE id {in_list} RETURNING id, lease_token, attempts, last_seq"
)
_RETRY_AT: Final = sql("UPDATE agent_runs SET next_attempt_at = {now_plus} WHERE id = ?")
_FAIL: Final = sql(
    "UPDATE agent_runs SET status = 'failed', last_error = ?, lease_owner = NULL, "
    "lease_expires_at = NULL, lease_token = lease_token + 1, wait_kind = NULL, "
    "wait_ref = NULL, wait_until = NULL, updated_at = zincir_now(), "
    "last_seq = {last_seq} + 1 WHERE id = ? RETURNING last_seq",
    seals=(0,),
    run_param=1,
)
_ATTEMPT: Final = sql(
    "SELECT status, attempts, wait_kind FROM agent_runs WHERE id = ? AND lease_token = ? "
    "AND (lease_owner IS NULL OR lease_owner = ?){for_no_key_update}"
)
_WAITING: Final = sql(
    "UPDATE agent_runs SET attempts = 0, next_attempt_at = NULL, updated_at = zincir_now() "
    "WHERE id = ?"
)
_BACK_OFF: Final = sql(
    "UPDATE agent_runs SET next_attempt_at = {now_plus}, updated_at = zincir_now() WHERE id = ?"
)
_FAILED_ATTEMPT: Final = sql(
    "UPDATE agent_runs SET last_error = ?, next_attempt_at = {now_plus}, "
    "updated_at = zincir_now(), lease_expires_at = {lease_expiry}, last_seq = {last_seq} + 1 "
    "WHERE id = ? RETURNING next_attempt_at, last_seq",
    seals=(0,),
    run_param=2,
)
_FINISHED: Final = sql("SELECT status FROM agent_runs WHERE id = ?")


@cache
def _claimable(gone: bool, pinned: bool, named: bool) -> Sql:
    """The claimable runs, oldest update first, locked (PostgreSQL) and skipping rows others
    hold; parameters: the gone owners, the versions, the names (each when asked), the limit."""
    where = CLAIMABLE.replace("{gone}", " OR r.lease_owner {in_list}" if gone else "")
    where += " AND r.app_version {in_list}" if pinned else ""
    where += " AND r.name {in_list}" if named else ""
    return sql(
        f"SELECT r.id, r.status, r.attempts, r.last_error FROM agent_runs AS r WHERE {where} "
        "ORDER BY r.updated_at, r.id LIMIT ?{skip_locked}"
    )


def _fail(
    tx: Tx, run_id: str, status: str, attempts: int, error: str
) -> tuple[str, int, list[NewEvent]]:
    """Mark a run failed after its last attempt (token bumped: a late owner is fenced)."""
    row = tx.one(_FAIL, (error, run_id))
    assert row is not None, "the run's row was locked or read in this transaction"
    event = transition(status, "failed", error=error, attempts=attempts)
    return run_id, int(row[0]) - 1, [event]


def claim(
    tx: Tx,
    owner: str,
    ttl: timedelta,
    limit: int,
    max_attempts: int | None,
    backoff: Backoff,
    app_versions: Collection[str] | None,
    names: Collection[str] | None,
) -> list[Lease]:
    """Claim up to ``limit`` claimable runs, failing those whose attempts are spent; the
    leases of the claimed runs, in claim order."""
    gone = gone_owners(row[0] for row in tx.all(_THIS_MACHINE, (this_machine_like(),)))
    params: list[object] = [tx.values(gone)] if gone else []
    if app_versions is not None:
        params.append(tx.values(list(app_versions)))
    if names is not None:
        params.append(tx.values(list(names)))
    params.append(limit)
    statement = _claimable(bool(gone), app_versions is not None, names is not None)
    rows = [
        (str(run_id), str(status), int(attempts), last_error)
        for run_id, status, attempts, last_error in tx.all(statement, params)
    ]
    if not rows:
        return []
    sealer = tx.sealer  # a sealed last error is opened only for a run failed here
    appended = [
        _fail(
            tx,
            run_id,
            status,
            attempts,
            attempt_error(
                attempts, last_error if sealer is None else sealer.open_text(last_error, run_id)
            ),
        )
        for run_id, status, attempts, last_error in rows
        if attempts_spent(attempts, max_attempts)
    ]
    wanted = [row for row in rows if not attempts_spent(row[2], max_attempts)]
    leases: list[Lease] = []
    if wanted:
        ids = [row[0] for row in wanted]
        claimed = {
            str(run_id): (int(token), int(attempt), int(last_seq))
            for run_id, token, attempt, last_seq in tx.all(
                _CLAIM, (owner, micros(ttl), micros(ttl), tx.values(ids))
            )
        }
        retry_at: list[tuple[object, ...]] = []
        for run_id, status, _, _ in wanted:
            token, attempt, last_seq = claimed[run_id]
            events = claim_events(status, owner, attempt, token)
            appended.append((run_id, last_seq - len(events), events))
            retry_at.append((micros(backoff(attempt)), run_id))
            leases.append(Lease(run_id, owner, token, ttl))
        tx.executemany(_RETRY_AT, retry_at)
    append_checked(tx, appended)
    return leases


def settle(
    tx: Tx, lease: Lease, error: str | None, max_attempts: int | None, backoff: Backoff
) -> None:
    """Record how the attempt under ``lease`` ended, unless its token was superseded or the
    run finished; on PostgreSQL the run's row is locked first, so a racing claim waits or
    skips it."""
    row = tx.one(_ATTEMPT, (lease.run_id, lease.token, lease.owner))
    if row is None or row[0] in TERMINAL_STATUSES:
        return  # completed or failed by the handler, or taken over since
    status, attempts, waiting = row
    if error is None:
        if waiting is not None:
            tx.execute(_WAITING, (lease.run_id,))
        else:
            tx.execute(_BACK_OFF, (micros(backoff(attempts)), lease.run_id))
        return
    if attempts_spent(attempts, max_attempts):
        append_checked(tx, [_fail(tx, lease.run_id, status, attempts, error)])
        return
    failed = tx.one(_FAILED_ATTEMPT, (error, micros(backoff(attempts)), lease.run_id))
    assert failed is not None, "the run's row was read in this transaction"
    retry, last_seq = failed
    event = attempt_failed(attempts, error, to_db(tx.time(retry)))
    append_checked(tx, [(lease.run_id, int(last_seq) - 1, [event])])


class ClaimOps(Rules):
    """Claiming runs for a ResumeWorker and recording how each attempt ended."""

    async def claim_runs(
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
        """Claim up to ``limit`` claimable runs in one transaction; return their leases.

        Each claim bumps the token, counts an attempt and sets the next attempt's time;
        a run whose ``max_attempts`` are spent is marked failed instead. With
        ``app_versions`` only runs of one of those versions are claimed (or failed), with
        ``names`` only runs with one of those names.
        """
        return await self._write_tx(
            lambda tx: claim(tx, owner, ttl, limit, max_attempts, backoff, app_versions, names)
        )

    async def run_is_finished(self, run_id: str) -> bool:
        """True when the run is terminal (or gone)."""

        def read(tx: Tx) -> bool:
            row = tx.one(_FINISHED, (run_id,))
            return row is None or row[0] in TERMINAL_STATUSES

        return await self._read_tx(read)

    async def settle_attempt(
        self, lease: Lease, error: str | None, *, max_attempts: int | None, backoff: Backoff
    ) -> None:
        """Record how the attempt under ``lease`` ended, unless the run moved on since.

        A clean return backs off until the next attempt (or, when the run now waits on a
        timer, message or child, resets the attempt count: waiting is progress). An error
        records ``last_error`` and ``attempt_failed``; after ``max_attempts`` the run fails.
        The handler may have released the lease: the token alone fences this write.
        """
        await self._write_tx(lambda tx: settle(tx, lease, error, max_attempts, backoff))
