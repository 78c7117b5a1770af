"""Durable steps (PostgreSQL): a claim row per (run, name) that points, once finished, at
its event.

A step's row (``step_claims``) is its claim: the lease owner and token that may run it.
Its result is stored once, in the ``step_completed`` event its finishing statement
appends, and the row then holds that event's seq. Only a context that still holds the
run's lease may claim, finish, drop or recover a claim: the fence is checked in the claim's
own transaction, holding the run's row lock until COMMIT, so a new owner's takeover waits
for it or fences it out; a fenced owner's claim stays until the new owner's ``recover()``.
"""

from __future__ import annotations

from collections.abc import Collection

from ..._json import encode_checked
from .._records import Lease, NewEvent
from .._workflow_records import StepClaim
from .._workflow_rules import step_claim_released, step_completed, step_result
from ._base import CheckFailed, Conn, PostgresBase
from ._log import STEP_RESULT, append, check_fence, diagnose

__all__ = ["StepOps"]

_CLAIMED = StepClaim("claimed")
_INSERT = (
    "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, started_at) "
    "SELECT id, %s, lease_owner, lease_token, zincir_now() FROM agent_runs "
    "WHERE id = %s AND lease_owner = %s AND lease_token = %s "
    "AND status IN ('pending', 'running') FOR SHARE "
    "ON CONFLICT (run_id, name) DO NOTHING RETURNING 1"
)
"""A claim fenced in one statement: the run's row, still this lease's, is locked (shared)
until COMMIT, so a takeover waits for the claim or the claim sees the new token."""
_HOLDER = (
    "SELECT c.claim_owner, c.claim_token, c.event_seq, coalesce(e.payload, "
    "(SELECT a.payload FROM archived_events AS a WHERE a.run_id = c.run_id "
    "AND a.seq = c.event_seq)) FROM step_claims AS c LEFT JOIN events AS e "
    "ON e.run_id = c.run_id AND e.seq = c.event_seq WHERE c.run_id = %s AND c.name = %s"
)


def _claim(conn: Conn, lease: Lease, name: str) -> StepClaim | None:
    """One try at claiming: None when the step's row changed under it (a concurrent
    ``recover()``, ``abandon_step`` or result) between two statements; try again."""
    if conn.execute(_INSERT, (name, lease.run_id, lease.owner, lease.token)).fetchone():
        return _CLAIMED
    row = conn.execute(_HOLDER, (lease.run_id, name)).fetchone()
    if row is None:  # not inserted and absent: fenced, or the conflicting claim vanished
        check_fence(conn, lease)
        return None
    owner, token, event_seq, payload = row
    if event_seq is not None:
        return StepClaim("completed", step_result(payload))
    if (owner, token) != (lease.owner, lease.token):
        return StepClaim("held", owner=owner, token=token)
    check_fence(conn, lease)
    again = conn.execute(
        "UPDATE step_claims SET started_at = zincir_now() WHERE run_id = %s AND name = %s "
        "AND event_seq IS NULL AND claim_owner = %s AND claim_token = %s RETURNING 1",
        (lease.run_id, name, lease.owner, lease.token),
    ).fetchone()
    return _CLAIMED if again is not None else None


def _result_params(lease: Lease, name: str, result_json: str) -> dict[str, object]:
    """The parameters of :data:`STEP_RESULT` for ``lease``'s result of step ``name``."""
    return {
        "run": lease.run_id,
        "name": name,
        "owner": lease.owner,
        "token": lease.token,
        "ttl": lease.ttl,
        "payload": step_completed(name, result_json).payload_json,
    }


def _raise_fenced(conn: Conn, lease: Lease) -> None:
    """Raise why ``lease`` can no longer write its run (FencedOut, RunTerminal, ...)."""
    raise diagnose(conn, lease.run_id, lease.token)


class StepOps(PostgresBase):
    """Claim, finish, abandon and recover durable steps."""

    async def claim_step(self, lease: Lease, name: str) -> StepClaim:
        """Claim step ``name`` for ``lease``, or return its stored result, or its holder.

        A running claim of this very lease (owner and token) is claimed again: the caller
        vouches that no body of this context runs it (a result write that failed left it).
        The claim is committed without waiting for the server's disk (steps are at least
        once: after a server crash the body's effect is as uncertain as the claim).
        """

        def write(conn: Conn) -> StepClaim:
            while True:  # each round either inserts or finds a row that changed under it
                found = _claim(conn, lease, name)
                if found is not None:
                    return found

        # The common case, a new claim, is the fenced INSERT alone as its own transaction;
        # anything else (a result, a holder, a fence) is judged in a full transaction.
        params = (name, lease.run_id, lease.owner, lease.token)
        if await self._write_one(_INSERT, params, durable=False) is not None:
            return _CLAIMED
        return await self._write(write, durable=False)

    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int:
        """Store the result of this lease's claim on ``name`` with its ``step_completed``.

        StepInProgress if the claim was released (``recover()``) meanwhile; returns the seq.
        """
        try:
            row = await self._write_one(STEP_RESULT, _result_params(lease, name, result_json))
        except CheckFailed:
            raise step_claim_released(lease.run_id, name) from None
        if row is None:  # the fence failed: nothing was stored; say why
            await self._read(lambda conn: _raise_fenced(conn, lease))
        assert row is not None
        return int(row[0])

    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        """:data:`STEP_RESULT`, then the fenced claim INSERT for ``next_name``, in one
        transaction; False when that step already has a row (its :meth:`claim_step` judges
        it then)."""
        params = _result_params(lease, name, result_json)

        def write(conn: Conn) -> bool:
            if conn.execute(STEP_RESULT, params).fetchone() is None:
                _raise_fenced(conn, lease)  # nothing was stored; say why
            inserted = conn.execute(_INSERT, (next_name, lease.run_id, lease.owner, lease.token))
            return inserted.fetchone() is not None

        try:
            return await self._write(write)
        except CheckFailed:
            raise step_claim_released(lease.run_id, name) from None

    async def abandon_step(self, lease: Lease, name: str) -> bool:
        """Drop this lease's running claim on ``name`` so the step can be retried.

        Fenced: a context that lost the lease raises (FencedOut, RunTerminal) and its claim
        stays for the new owner's ``recover()``. False if there was no such claim.
        """

        def write(conn: Conn) -> bool:
            check_fence(conn, lease)
            return (
                conn.execute(
                    "DELETE FROM step_claims WHERE run_id = %s AND name = %s "
                    "AND event_seq IS NULL "
                    "AND claim_owner = %s AND claim_token = %s RETURNING 1",
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
        keep = sorted(in_flight)

        def write(conn: Conn) -> list[str]:
            append(conn, lease)  # the fence, and the run's row lock: claims wait for COMMIT
            names = sorted(
                str(name)
                for (name,) in conn.execute(
                    "DELETE FROM step_claims WHERE run_id = %s AND event_seq IS NULL "
                    "AND NOT (claim_owner IS NOT DISTINCT FROM %s "
                    "AND claim_token IS NOT DISTINCT FROM %s AND name = ANY(%s)) RETURNING name",
                    (lease.run_id, lease.owner, lease.token, keep),
                )
            )
            if names:
                event = NewEvent("steps_recovered", encode_checked({"names": names}))
                append(conn, lease, [event])
            return names

        return await self._write(write)
