"""Durable steps: a claim row per (run, name) that points, once finished, at its event.

A step's row (``step_claims``) is its claim: the lease owner and token that may run it.
Its result is stored once, in the ``step_completed`` event its finishing transaction
appends, and the row then holds that event's seq. Only a context that still holds the
run's lease may claim, finish, drop or recover a claim: a fenced owner's claim stays until
the new owner's ``recover()``.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import apsw

from ..._json import encode_checked
from ..._time import to_db
from .._records import Lease, NewEvent
from .._workflow_records import StepClaim
from .._workflow_rules import step_claim_released, step_completed, step_result
from ._base import SQLiteBase
from ._log import append, check_fence, diagnose

__all__ = ["StepOps"]

_CLAIMED = StepClaim("claimed")
_CLAIM = (
    "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, started_at) "
    "SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM agent_runs WHERE id = ?1 "
    "AND lease_owner = ?3 AND lease_token = ?4 AND status IN ('pending', 'running')) "
    "ON CONFLICT (run_id, name) DO NOTHING RETURNING 1"
)
"""A claim fenced in one statement: inserted only while the lease holds the live run."""
_HOLDER = (
    "SELECT c.claim_owner, c.claim_token, c.event_seq, coalesce(e.payload, "
    "(SELECT a.payload FROM archived_events AS a WHERE a.run_id = c.run_id "
    "AND a.seq = c.event_seq)) FROM step_claims AS c LEFT JOIN events AS e "
    "ON e.run_id = c.run_id AND e.seq = c.event_seq WHERE c.run_id = ? AND c.name = ?"
)
_POINT = (
    "UPDATE step_claims SET event_seq = ? WHERE run_id = ? AND name = ? "
    "AND event_seq IS NULL AND claim_owner = ? AND claim_token = ? RETURNING 1"
)


def _claim_new(conn: apsw.Connection, lease: Lease, name: str, stamp: str) -> bool:
    """Insert ``lease``'s claim on ``name`` unless the step has a row or the lease no longer
    holds the run (the caller tells the two apart)."""
    inserted = conn.execute(
        _CLAIM, (lease.run_id, name, lease.owner, lease.token, stamp)
    ).fetchone()
    return inserted is not None


def _finish(conn: apsw.Connection, now: datetime, lease: Lease, name: str, result_json: str) -> int:
    """Append step ``name``'s ``step_completed`` with its result (fenced) and point
    ``lease``'s claim at it; StepInProgress if the claim was released meanwhile. Returns the
    event's seq."""
    seq = append(conn, lease, now, [step_completed(name, result_json)])
    if conn.execute(_POINT, (seq, lease.run_id, name, lease.owner, lease.token)).fetchone() is None:
        raise step_claim_released(lease.run_id, name)
    return seq


class StepOps(SQLiteBase):
    """Claim, finish, abandon and recover durable steps."""

    async def claim_step(self, lease: Lease, name: str) -> StepClaim:
        """Claim step ``name`` for ``lease``, or return its stored result, or its holder.

        A running claim of this very lease (owner and token) is claimed again: the caller
        vouches that no body of this context runs it (a result write that failed left it).
        The claim is not fsynced: it survives a process crash, and after a power loss the
        body's effect is as uncertain as the claim (steps are at least once).
        """

        def write(conn: apsw.Connection) -> StepClaim:
            stamp = to_db(self.clock())
            if _claim_new(conn, lease, name, stamp):
                # The run's row (lease expiry, seq) is left to the result's transaction:
                # one page less to commit per step.
                return _CLAIMED
            row = conn.execute(_HOLDER, (lease.run_id, name)).fetchone()
            if row is None:  # no row, and none inserted: the lease no longer holds the run
                raise diagnose(conn, lease.run_id, lease.token)
            owner, token, event_seq, payload = row
            if event_seq is not None:
                return StepClaim("completed", step_result(payload))
            if (owner, token) == (lease.owner, lease.token):
                check_fence(conn, lease)
                conn.execute(
                    "UPDATE step_claims SET started_at = ? WHERE run_id = ? AND name = ?",
                    (stamp, lease.run_id, name),
                )
                return _CLAIMED
            return StepClaim("held", owner=owner, token=token)

        return await self._write(write, durable=False)

    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int:
        """Store the result of this lease's claim on ``name`` with its ``step_completed``.

        StepInProgress if the claim was released (``recover()``) meanwhile; returns the seq.
        """
        return await self._write(lambda conn: _finish(conn, self.clock(), lease, name, result_json))

    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        """Store the result and insert the claim on ``next_name`` in one transaction: the
        claim ahead commits with the result, so the next step's own claim costs nothing. False
        when ``next_name`` already has a row (its result, or a claim), which its own
        :meth:`claim_step` then judges."""

        def write(conn: apsw.Connection) -> bool:
            now = self.clock()
            _finish(conn, now, lease, name, result_json)
            return _claim_new(conn, lease, next_name, to_db(now))

        return await self._write(write)

    async def abandon_step(self, lease: Lease, name: str) -> bool:
        """Drop this lease's running claim on ``name`` so the step can be retried.

        Fenced: a context that lost the lease raises (FencedOut, RunTerminal) and its claim
        stays for the new owner's ``recover()``. False if there was no such claim.
        """

        def write(conn: apsw.Connection) -> bool:
            check_fence(conn, lease)
            return (
                conn.execute(
                    "DELETE FROM step_claims WHERE run_id = ? AND name = ? AND event_seq IS NULL "
                    "AND claim_owner = ? AND claim_token = ? RETURNING 1",
                    (lease.run_id, name, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def recover_steps(self, lease: Lease, *, in_flight: Collection[str] = ()) -> list[str]:
        """Release every unfinished claim of the run except this lease's ``in_flight`` ones.

        Earlier owners' claims and this lease's own stale ones (a result write that failed)
        are deleted, with one ``steps_recovered`` event; returns the names, sorted.
        """
        keep = encode_checked(sorted(in_flight))

        def write(conn: apsw.Connection) -> list[str]:
            now = self.clock()
            append(conn, lease, now)
            names = sorted(
                str(name)
                for (name,) in conn.execute(
                    "DELETE FROM step_claims WHERE run_id = ? AND event_seq IS NULL "
                    "AND NOT (claim_owner IS ? AND claim_token IS ? "
                    "AND name IN (SELECT value FROM json_each(?))) RETURNING name",
                    (lease.run_id, lease.owner, lease.token, keep),
                )
            )
            if names:
                event = NewEvent("steps_recovered", encode_checked({"names": names}))
                append(conn, lease, now, [event])
            return names

        return await self._write(write)
