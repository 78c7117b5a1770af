"""PostgreSQL: claims of abandoned or waiting runs (the ResumeWorker) and how an attempt
ended.

A run is claimable when it is not terminal, its lease is absent or expired (or held by a
process of this machine that provably died), its backoff (``next_attempt_at``) has passed
and its workflow wait, if any, is satisfied, all judged by ``zincir_now()``. Claimable rows
are locked ``FOR NO KEY UPDATE SKIP LOCKED``: workers on several machines claiming at once
take disjoint runs, and a row another transaction holds (a claim in flight, a live owner's
write) is passed over rather than waited for; the key-share locks of foreign-key checks
(events, child runs) do not hide a row. Each claim bumps the fencing token in the same
transaction. A row locked for a dead owner's lease is judged again once locked: if a live
process took it over meanwhile, it is passed over.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta

from .._owner import gone_owners, this_machine_like
from .._records import TERMINAL_STATUSES, Lease, NewEvent
from .._run_rules import (
    attempt_error,
    attempt_failed,
    attempts_spent,
    claim_events,
    transition,
)
from ._base import Conn, PostgresBase, one
from ._log import append_checked, text_time

__all__ = ["CLAIMABLE_SQL", "ClaimOps", "claimable_sql"]

Backoff = Callable[[int], timedelta]

_LAPSED = (
    "r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at <= zincir_now()"
)
_GONE = " OR r.lease_owner = ANY(%s::text[])"
"""A lease held by an owner whose process provably died (one of a list of owner ids)."""
_THIS_MACHINE = (
    "SELECT DISTINCT lease_owner FROM agent_runs "
    "WHERE status IN ('pending', 'running') AND lease_owner LIKE %s"
)
"""The owners of this machine holding leases of unfinished runs (judged one by one)."""


def claimable_sql(gone: bool) -> str:
    """Whether run ``r`` may be claimed now; with ``gone``, a live lease of one of the
    owners of its one placeholder (a text array) counts as lapsed."""
    lapsed = _LAPSED + (_GONE if gone else "")
    return f"""
r.status IN ('pending', 'running')
AND ({lapsed})
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


CLAIMABLE_SQL = claimable_sql(False)
"""Whether run ``r`` may be claimed now (no placeholders)."""

_PINNED = " AND r.app_version = ANY(%s::text[])"
"""Only runs of one of the versions a pinned worker serves."""

_NAMED = " AND r.name = ANY(%s::text[])"
"""Only runs with one of the names a worker serves."""

_CLAIM = (
    "UPDATE agent_runs AS r SET lease_owner = %s, lease_token = r.lease_token + 1, "
    "lease_expires_at = zincir_now() + %s::interval, attempts = r.attempts + 1, "
    "status = 'running', wait_kind = NULL, wait_ref = NULL, wait_until = NULL, "
    "updated_at = zincir_now(), next_attempt_at = zincir_now() + v.delay, "
    "last_seq = r.last_seq + CASE r.status WHEN 'pending' THEN 2 ELSE 1 END "
    "FROM unnest(%s::text[], %s::interval[]) AS v(id, delay) WHERE r.id = v.id "
    "RETURNING r.id, r.lease_token, r.attempts, r.last_seq"
)


def _fail(
    conn: Conn, run_id: str, status: str, attempts: int, error: str
) -> tuple[str, int, list[NewEvent]]:
    """Mark a run failed after its last attempt (token bumped: a late owner is fenced)."""
    (last_seq,) = one(
        conn,
        "UPDATE agent_runs SET status = 'failed', last_error = %s, lease_owner = NULL, "
        "lease_expires_at = NULL, lease_token = lease_token + 1, wait_kind = NULL, "
        "wait_ref = NULL, wait_until = NULL, updated_at = zincir_now(), "
        "last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq",
        (error, run_id),
    )
    event = transition(status, "failed", error=error, attempts=attempts)
    return run_id, int(last_seq) - 1, [event]


def _claim(
    conn: Conn,
    owner: str,
    ttl: timedelta,
    limit: int,
    max_attempts: int | None,
    backoff: Backoff,
    app_versions: Collection[str] | None,
    names: Collection[str] | None,
) -> list[Lease]:
    """Lock up to ``limit`` claimable runs (skipping rows others hold), fail the spent ones
    and claim the rest; the leases of the claimed runs, in claim order. With
    ``app_versions``, only runs of one of those versions; with ``names``, only runs with
    one of those names."""
    pinned = ""
    gone = gone_owners(row[0] for row in conn.execute(_THIS_MACHINE, (this_machine_like(),)))
    params: list[object] = [gone] if gone else []
    if app_versions is not None:
        pinned += _PINNED
        params.append(list(app_versions))
    if names is not None:
        pinned += _NAMED
        params.append(list(names))
    params.append(limit)
    rows = [
        (str(run_id), str(status), int(attempts), last_error)
        for run_id, status, attempts, last_error in conn.execute(
            f"SELECT r.id, r.status, r.attempts, r.last_error FROM agent_runs AS r "
            f"WHERE {claimable_sql(bool(gone))}{pinned} ORDER BY r.updated_at, r.id LIMIT %s "
            "FOR NO KEY UPDATE OF r SKIP LOCKED",
            params,
        )
    ]
    if not rows:
        return []
    spent = [row for row in rows if attempts_spent(row[2], max_attempts)]
    appended = [
        _fail(conn, run_id, status, attempts, attempt_error(attempts, last_error))
        for run_id, status, attempts, last_error in spent
    ]
    wanted = [row for row in rows if not attempts_spent(row[2], max_attempts)]
    claimed: dict[str, tuple[int, int, int]] = {}
    if wanted:
        ids = [row[0] for row in wanted]
        delays = [backoff(attempts + 1) for _, _, attempts, _ in wanted]
        claimed = {
            str(run_id): (int(token), int(attempt), int(last_seq))
            for run_id, token, attempt, last_seq in conn.execute(_CLAIM, (owner, ttl, ids, delays))
        }
    leases: list[Lease] = []
    for run_id, status, _, _ in wanted:
        token, attempt, last_seq = claimed[run_id]
        events = claim_events(status, owner, attempt, token)
        appended.append((run_id, last_seq - len(events), events))
        leases.append(Lease(run_id, owner, token, ttl))
    append_checked(conn, appended)
    return leases


def _settle(
    conn: Conn, lease: Lease, error: str | None, max_attempts: int | None, backoff: Backoff
) -> None:
    """Record how the attempt under ``lease`` ended, unless its token was superseded or
    the run finished; the run's row is locked first, so a racing claim waits or skips it."""
    row = conn.execute(
        "SELECT status, attempts, wait_kind FROM agent_runs WHERE id = %s "
        "AND lease_token = %s AND (lease_owner IS NULL OR lease_owner = %s) FOR NO KEY UPDATE",
        (lease.run_id, lease.token, lease.owner),
    ).fetchone()
    if row is None or row[0] in TERMINAL_STATUSES:
        return  # completed or failed by the handler, or taken over since
    status, attempts, waiting = row
    if error is None:
        if waiting is not None:
            conn.execute(
                "UPDATE agent_runs SET attempts = 0, next_attempt_at = NULL, "
                "updated_at = zincir_now() WHERE id = %s",
                (lease.run_id,),
            )
        else:
            conn.execute(
                "UPDATE agent_runs SET next_attempt_at = zincir_now() + %s::interval, "
                "updated_at = zincir_now() WHERE id = %s",
                (backoff(attempts), lease.run_id),
            )
        return
    if attempts_spent(attempts, max_attempts):
        append_checked(conn, [_fail(conn, lease.run_id, status, attempts, error)])
        return
    retry, last_seq = one(
        conn,
        "UPDATE agent_runs SET last_error = %s, next_attempt_at = zincir_now() + %s::interval, "
        "updated_at = zincir_now(), last_seq = last_seq + 1 WHERE id = %s "
        "RETURNING next_attempt_at, last_seq",
        (error, backoff(attempts), lease.run_id),
    )
    event = attempt_failed(attempts, error, text_time(retry))
    append_checked(conn, [(lease.run_id, int(last_seq) - 1, [event])])


class ClaimOps(PostgresBase):
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
        return await self._write(
            lambda conn: _claim(conn, owner, ttl, limit, max_attempts, backoff, app_versions, names)
        )

    async def run_is_finished(self, run_id: str) -> bool:
        """True when the run is terminal (or gone)."""

        def read(conn: Conn) -> bool:
            row = conn.execute("SELECT status FROM agent_runs WHERE id = %s", (run_id,)).fetchone()
            return row is None or row[0] in TERMINAL_STATUSES

        return await self._read(read)

    async def settle_attempt(
        self, lease: Lease, error: str | None, *, max_attempts: int | None, backoff: Backoff
    ) -> None:
        """Record how the attempt under ``lease`` ended, unless the run moved on since.

        A clean return backs off until the next attempt (or, when the run now waits on a
        timer, message or child, resets the attempt count: waiting is progress). An error
        records ``last_error`` and ``attempt_failed``; after ``max_attempts`` the run fails.
        The handler may have released the lease: the token alone fences this write.
        """
        await self._write(lambda conn: _settle(conn, lease, error, max_attempts, backoff))
