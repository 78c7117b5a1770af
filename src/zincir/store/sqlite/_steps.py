"""Durable steps: a claim row per (run, name), its result stored once, fenced releases.

A step's row is its claim (``running``, with the lease owner and token) until its result is
stored (``completed``). Only a context that still holds the run's lease may claim, finish,
drop or recover a claim: a fenced owner's claim stays until the new owner's ``recover()``.
"""

from __future__ import annotations

from collections.abc import Collection

import apsw

from ..._errors import StepInProgress
from ..._json import encode_checked, loads_strict
from ..._time import to_db
from .._records import Lease, NewEvent
from .._workflow_records import StepClaim
from ._base import SQLiteBase
from ._log import append, check_fence

__all__ = ["StepOps"]

_CLAIMED = StepClaim("claimed")


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
            inserted = conn.execute(
                "INSERT INTO steps (run_id, name, status, claim_owner, claim_token, started_at) "
                "VALUES (?, ?, 'running', ?, ?, ?) ON CONFLICT (run_id, name) DO NOTHING "
                "RETURNING 1",
                (lease.run_id, name, lease.owner, lease.token, stamp),
            ).fetchone()
            if inserted is not None:
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
        event = NewEvent("step_completed", encode_checked({"name": name}))

        def write(conn: apsw.Connection) -> int:
            now = self.clock()
            stamp = to_db(now)
            seq = append(conn, lease, now, [event], stamp=stamp)
            stored = conn.execute(
                "UPDATE steps SET status = 'completed', result = ?, completed_at = ? "
                "WHERE run_id = ? AND name = ? AND status = 'running' "
                "AND claim_owner = ? AND claim_token = ? RETURNING 1",
                (result_json, stamp, lease.run_id, name, lease.owner, lease.token),
            ).fetchone()
            if stored is None:
                raise StepInProgress(
                    f"the claim on step {name!r} was released (recover()) while its body ran; "
                    "its result was not stored",
                    run_id=lease.run_id,
                )
            return seq

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
