"""Claims of abandoned or waiting runs (the ResumeWorker) and how an attempt ended.

A run is claimable when it is not terminal, its lease is absent or expired (or held by a
process of this machine that provably died), its backoff (``next_attempt_at``) has passed
and its workflow wait, if any, is satisfied. A claim is one conditional UPDATE that bumps
the fencing token, inside one ``BEGIN IMMEDIATE`` transaction, so racing workers never
claim one run twice and never take a live lease.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime, timedelta

import apsw

from ..._json import encode_checked
from ..._time import to_db
from .._owner import gone_owners, this_machine_like
from .._records import TERMINAL_STATUSES, Lease, NewEvent
from .._run_rules import (
    attempt_error,
    attempt_failed,
    attempts_spent,
    claim_events,
    transition,
)
from ._base import SQLiteBase, one
from ._log import append_checked, last_seq_sql, lease_expiry_sql, ttl_us

__all__ = ["CLAIMABLE_SQL", "ClaimOps", "claimable_sql"]

Backoff = Callable[[int], timedelta]

_LAPSED = f"r.lease_owner IS NULL OR r.lease_expires_at IS NULL OR {lease_expiry_sql('r')} <= :now"
_GONE = " OR r.lease_owner IN (SELECT value FROM json_each(:gone))"
"""A lease held by an owner whose process provably died (a JSON array of owner ids)."""
_THIS_MACHINE = (
    "SELECT DISTINCT lease_owner FROM agent_runs "
    "WHERE status IN ('pending', 'running') AND lease_owner LIKE ?"
)
"""The owners of this machine holding leases of unfinished runs (judged one by one)."""


def claimable_sql(gone: bool) -> str:
    """Whether run ``r`` may be claimed at ``:now``; with ``gone``, a live lease of one of
    the ``:gone`` owners counts as lapsed."""
    lapsed = _LAPSED + (_GONE if gone else "")
    return f"""
r.status IN ('pending', 'running')
AND ({lapsed})
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


CLAIMABLE_SQL = claimable_sql(False)

_PINNED = " AND r.app_version IN (SELECT value FROM json_each(:versions))"
"""Only runs of one of the versions (a JSON array) a pinned worker serves."""

_NAMED = " AND r.name IN (SELECT value FROM json_each(:names))"
"""Only runs with one of the names (a JSON array) a worker serves."""


def _fail(
    conn: apsw.Connection, run_id: str, stamp: str, status: str, attempts: int, error: str
) -> tuple[str, int, list[NewEvent]]:
    """Mark a run failed after its last attempt (token bumped: a late owner is fenced)."""
    (last_seq,) = one(
        conn,
        "UPDATE agent_runs SET status = 'failed', last_error = ?, lease_owner = NULL, "
        "lease_expires_at = NULL, lease_token = lease_token + 1, wait_kind = NULL, "
        f"wait_ref = NULL, wait_until = NULL, updated_at = ?, last_seq = {last_seq_sql()} + 1 "
        "WHERE id = ? RETURNING last_seq",
        (error, stamp, run_id),
    )
    event = transition(status, "failed", error=error, attempts=attempts)
    return run_id, int(last_seq) - 1, [event]


class ClaimOps(SQLiteBase):
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
        pinned = "" if app_versions is None else _PINNED
        pinned += "" if names is None else _NAMED
        versions = {} if app_versions is None else {"versions": encode_checked(list(app_versions))}
        if names is not None:
            versions["names"] = encode_checked(list(names))

        def write(conn: apsw.Connection) -> list[Lease]:
            now = self.clock()
            stamp = to_db(now)
            gone = gone_owners(
                row[0] for row in conn.execute(_THIS_MACHINE, (this_machine_like(),))
            )
            dead = {"gone": encode_checked(gone)} if gone else {}
            rows = [
                (str(run_id), str(status), int(attempts), last_error)
                for run_id, status, attempts, last_error in conn.execute(
                    f"SELECT r.id, r.status, r.attempts, r.last_error FROM agent_runs AS r "
                    f"WHERE {claimable_sql(bool(gone))}{pinned} "
                    "ORDER BY r.updated_at, r.id LIMIT :limit",
                    {"now": stamp, "limit": limit, **versions, **dead},
                )
            ]
            if not rows:
                return []
            spent = [row for row in rows if attempts_spent(row[2], max_attempts)]
            appended = [
                _fail(conn, run_id, stamp, status, attempts, attempt_error(attempts, last_error))
                for run_id, status, attempts, last_error in spent
            ]
            wanted = [row[0] for row in rows if not attempts_spent(row[2], max_attempts)]
            claimed = (
                []
                if not wanted
                else [
                    (str(run_id), int(token), int(attempt), int(last_seq))
                    for run_id, token, attempt, last_seq in conn.execute(
                        "UPDATE agent_runs SET lease_owner = :owner, "
                        "lease_token = lease_token + 1, lease_expires_at = :expires, "
                        "lease_ttl_us = :ttl_us, "
                        "attempts = attempts + 1, status = 'running', wait_kind = NULL, "
                        "wait_ref = NULL, wait_until = NULL, updated_at = :now, "
                        f"last_seq = {last_seq_sql()} "
                        "+ CASE status WHEN 'pending' THEN 2 ELSE 1 END "
                        "WHERE id IN (SELECT value FROM json_each(:ids)) "
                        "RETURNING id, lease_token, attempts, last_seq",
                        {
                            "owner": owner,
                            "expires": to_db(now + ttl),
                            "ttl_us": ttl_us(ttl),
                            "now": stamp,
                            "ids": encode_checked(wanted),
                        },
                    )
                ]
            )
            status_of = {row[0]: row[1] for row in rows}
            leases: list[Lease] = []
            retry_at: list[tuple[str, str]] = []
            for run_id, token, attempt, last_seq in claimed:
                events = claim_events(status_of[run_id], owner, attempt, token)
                appended.append((run_id, last_seq - len(events), events))
                retry_at.append((to_db(now + backoff(attempt)), run_id))
                leases.append(Lease(run_id, owner, token, ttl))
            append_checked(conn, now, appended)
            conn.executemany("UPDATE agent_runs SET next_attempt_at = ? WHERE id = ?", retry_at)
            return leases

        return await self._write(write)

    async def run_is_finished(self, run_id: str) -> bool:
        """True when the run is terminal (or gone)."""

        def read(conn: apsw.Connection) -> bool:
            row = conn.execute("SELECT status FROM agent_runs WHERE id = ?", (run_id,)).fetchone()
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

        def write(conn: apsw.Connection) -> None:
            now: datetime = self.clock()
            stamp = to_db(now)
            row = conn.execute(
                f"SELECT status, attempts, wait_kind, {last_seq_sql()} FROM agent_runs "
                "WHERE id = ? AND lease_token = ? AND (lease_owner IS NULL OR lease_owner = ?)",
                (lease.run_id, lease.token, lease.owner),
            ).fetchone()
            if row is None or row[0] in TERMINAL_STATUSES:
                return  # completed or failed by the handler, or taken over since
            status, attempts, waiting, last_seq = row
            if error is None:
                if waiting is not None:
                    conn.execute(
                        "UPDATE agent_runs SET attempts = 0, next_attempt_at = NULL, "
                        "updated_at = ? WHERE id = ?",
                        (stamp, lease.run_id),
                    )
                else:
                    conn.execute(
                        "UPDATE agent_runs SET next_attempt_at = ?, updated_at = ? WHERE id = ?",
                        (to_db(now + backoff(attempts)), stamp, lease.run_id),
                    )
                return
            if attempts_spent(attempts, max_attempts):
                append_checked(
                    conn, now, [_fail(conn, lease.run_id, stamp, status, attempts, error)]
                )
                return
            retry = to_db(now + backoff(attempts))
            conn.execute(
                "UPDATE agent_runs SET last_error = ?, next_attempt_at = ?, updated_at = ?, "
                f"lease_expires_at = {lease_expiry_sql()}, last_seq = ? WHERE id = ?",
                (error, retry, stamp, int(last_seq) + 1, lease.run_id),
            )
            event = attempt_failed(attempts, error, retry)
            append_checked(conn, now, [(lease.run_id, int(last_seq), [event])])

        await self._write(write)
