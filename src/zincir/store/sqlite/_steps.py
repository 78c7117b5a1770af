"""Durable steps: a claim row per (run, name), its result stored once, fenced releases.

A step's row is its claim (``running``, with the lease owner and token) until its result is
stored (``completed``). Only a context that still holds the run's lease may claim, finish,
drop or recover a claim: a fenced owner's claim stays until the new owner's ``recover()``.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import apsw

from ..._json import encode_checked, loads_strict
from ..._time import to_db
from .._records import Lease, NewEvent
from .._workflow_records import StepClaim
from .._workflow_rules import step_claim_released
from ._base import SQLiteBase
from ._log import append, check_fence

__all__ = ["StepOps"]

_CLAIMED = StepClaim("claimed")


def _claim_new(conn: apsw.Connection, lease: Lease, name: str, stamp: str) -> bool:
    """Insert ``lease``'s claim on ``name`` unless the step has a row; the caller checks the
    fence in the same transaction."""
    inserted = conn.execute(
        "INSERT INTO steps (run_id, name, status, claim_owner, claim_token, started_at) "
        "VALUES (?, ?, 'running', ?, ?, ?) ON CONFLICT (run_id, name) DO NOTHING "
        "RETURNING 1",
        (lease.run_id, name, lease.owner, lease.token, stamp),
    ).fetchone()
    return inserted is not None


def _finish(conn: apsw.Connection, now: datetime, lease: Lease, name: str, result_json: str) -> int:
    """Store the result of ``lease``'s claim on ``name`` and append its ``step_completed``
    (fenced); StepInProgress if the claim was released meanwhile. Returns the event's seq."""
    stamp = to_db(now)
    event = NewEvent("step_completed", encode_checked({"name": name}))
    seq = append(conn, lease, now, [event], stamp=stamp)
    stored = conn.execute(
        "UPDATE steps SET status = 'completed', result = ?, completed_at = ? "
        "WHERE run_id = ? AND name = ? AND status = 'running' "
        "AND claim_owner = ? AND claim_token = ? RETURNING 1",
        (result_json, stamp, lease.run_id, name, lease.owner, lease.token),
    ).fetchone()
    if stored is None:
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
                # Fenced like every write; the run's row (lease expiry, seq) is left to the
                # result's transaction: one page less to commit per step.
                check_fence(conn, lease)
                return _CLAIMED
            row = conn.execute(
                "SELECT status, result, claim_owner, claim_token FROM steps "
                "WHERE run_id = ? AND name = ?",
                (lease.run_id, name),
            ).fetchone()
            assert row is not None  # the INSERT found it
            status, result, owner, token = row
            if status == "completed":
                return StepClaim("completed", loads_strict(result))
            if (owner, token) == (lease.owner, lease.token):
                check_fence(conn, lease)
                conn.execute(
                    "UPDATE steps SET started_at = ? WHERE run_id = ? AND name = ?",
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
                    "DELETE FROM steps WHERE run_id = ? AND name = ? AND status = 'running' "
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
                    "DELETE FROM steps WHERE run_id = ? AND status = 'running' "
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
