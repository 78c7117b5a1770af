"""Durable steps: a claim row per (run, name) that points, once finished, at its event.

A step's row (``step_claims``) is its claim: the lease owner and token that may run it. Its
result is stored once, in the ``step_completed`` event its finishing transaction appends,
and the row then holds that event's seq. Only a context that still holds the run's lease
may claim, finish, drop or recover a claim: the claim is fenced in its own statement (on
PostgreSQL holding the run's row lock until COMMIT, so a takeover waits for it or fences it
out); a fenced owner's claim stays until the new owner's ``recover()``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from .._json import encode_checked
from ._fence import check_fence
from ._records import Lease, NewEvent
from ._sql import Rules, Tx, sql
from ._workflow_records import StepClaim
from ._workflow_rules import step_claim_released, step_completed, step_result

__all__ = ["CLAIM", "StepOps"]

CLAIMED: Final = StepClaim("claimed")
CLAIM: Final = sql(
    "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, started_at) "
    "SELECT id, ?, lease_owner, lease_token, zincir_now() FROM agent_runs "
    "WHERE id = ? AND lease_owner = ? AND lease_token = ? "
    "AND status IN ('pending', 'running'){for_share} "
    "ON CONFLICT (run_id, name) DO NOTHING RETURNING 1"
)
"""A claim fenced in one statement, inserted only while the lease holds the live run
(parameters: name, run id, owner, token)."""
_HOLDER: Final = sql(
    "SELECT c.claim_owner, c.claim_token, c.event_seq, coalesce(e.payload, "
    "(SELECT a.payload FROM archived_events AS a WHERE a.run_id = c.run_id "
    "AND a.seq = c.event_seq)) FROM step_claims AS c LEFT JOIN events AS e "
    "ON e.run_id = c.run_id AND e.seq = c.event_seq WHERE c.run_id = ? AND c.name = ?",
    opens=(3,),
    run_param=0,
)
_RECLAIM: Final = sql(
    "UPDATE step_claims SET started_at = zincir_now() WHERE run_id = ? AND name = ? "
    "AND event_seq IS NULL AND claim_owner = ? AND claim_token = ? RETURNING 1"
)
_POINT: Final = sql(
    "UPDATE step_claims SET event_seq = ? WHERE run_id = ? AND name = ? "
    "AND event_seq IS NULL AND claim_owner = ? AND claim_token = ? RETURNING 1"
)
_ABANDON: Final = sql(
    "DELETE FROM step_claims WHERE run_id = ? AND name = ? AND event_seq IS NULL "
    "AND claim_owner = ? AND claim_token = ? RETURNING 1"
)
_RECOVER: Final = sql(
    "DELETE FROM step_claims WHERE run_id = ? AND event_seq IS NULL "
    "AND NOT coalesce(claim_owner = ? AND claim_token = ? AND name {in_list}, FALSE) "
    "RETURNING name"
)


def claim_params(lease: Lease, name: str) -> tuple[str, str, str, int]:
    """The parameters of :data:`CLAIM` for ``lease``'s claim on ``name``."""
    return (name, lease.run_id, lease.owner, lease.token)


def _claim(tx: Tx, lease: Lease, name: str) -> StepClaim:
    """Claim ``name``, or judge the row that is there: its result, its holder, or this
    lease's own stale claim (claimed again). Each round inserts or finds a row; a row that
    changed under it between two statements (PostgreSQL: a concurrent ``recover()``) makes
    another round."""
    while True:
        if tx.one(CLAIM, claim_params(lease, name)) is not None:
            return CLAIMED
        row = tx.one(_HOLDER, (lease.run_id, name))
        if row is None:  # not inserted and absent: fenced, or the claim vanished
            check_fence(tx, lease)
            continue
        owner, token, event_seq, payload = row
        if event_seq is not None:
            return StepClaim("completed", step_result(payload))
        if (owner, token) != (lease.owner, lease.token):
            return StepClaim("held", owner=owner, token=token)
        check_fence(tx, lease)
        if tx.one(_RECLAIM, (lease.run_id, name, lease.owner, lease.token)) is not None:
            return CLAIMED


def finish(tx: Tx, lease: Lease, name: str, result_json: str) -> int:
    """Append step ``name``'s ``step_completed`` with its result (fenced) and point
    ``lease``'s claim at it; StepInProgress if the claim was released meanwhile. Returns the
    event's seq."""
    seq = tx.append(lease, [step_completed(name, result_json)])
    if tx.one(_POINT, (seq, lease.run_id, name, lease.owner, lease.token)) is None:
        raise step_claim_released(lease.run_id, name)
    return seq


def _recover(tx: Tx, lease: Lease, keep: list[str]) -> list[str]:
    tx.append(lease)  # the fence, and on PostgreSQL the run's row lock: claims wait
    rows = tx.all(_RECOVER, (lease.run_id, lease.owner, lease.token, tx.values(keep)))
    names = sorted(str(name) for (name,) in rows)
    if names:
        tx.append(lease, [NewEvent("steps_recovered", encode_checked({"names": names}))])
    return names


class StepOps(Rules):
    """Claim, finish, abandon and recover durable steps."""

    async def claim_step(self, lease: Lease, name: str) -> StepClaim:
        """Claim step ``name`` for ``lease``, or return its stored result, or its holder.

        A running claim of this very lease (owner and token) is claimed again: the caller
        vouches that no body of this context runs it (a result write that failed left it).
        The claim is not waited onto the disk: it survives a process crash, and after a
        power loss the body's effect is as uncertain as the claim (steps are at least once).
        """
        return await self._write_first(
            CLAIM,
            (name, lease.run_id, lease.owner, lease.token),
            CLAIMED,
            lambda tx: _claim(tx, lease, name),
            durable=False,
        )

    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int:
        """Store the result of this lease's claim on ``name`` with its ``step_completed``.

        StepInProgress if the claim was released (``recover()``) meanwhile; returns the seq.
        """
        return await self._write_tx(lambda tx: finish(tx, lease, name, result_json))

    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        """Store the result and insert the claim on ``next_name`` in one transaction: the
        claim ahead commits with the result, so the next step's own claim costs nothing.
        False when ``next_name`` already has a row (its result, or a claim), which its own
        :meth:`claim_step` then judges."""

        def write(tx: Tx) -> bool:
            finish(tx, lease, name, result_json)
            return tx.one(CLAIM, claim_params(lease, next_name)) is not None

        return await self._write_tx(write)

    async def abandon_step(self, lease: Lease, name: str) -> bool:
        """Drop this lease's running claim on ``name`` so the step can be retried.

        Fenced: a context that lost the lease raises (FencedOut, RunTerminal) and its claim
        stays for the new owner's ``recover()``. False if there was no such claim.
        """

        def write(tx: Tx) -> bool:
            check_fence(tx, lease)
            return tx.one(_ABANDON, (lease.run_id, name, lease.owner, lease.token)) is not None

        return await self._write_tx(write)

    async def recover_steps(self, lease: Lease, *, in_flight: Collection[str] = ()) -> list[str]:
        """Release every unfinished claim of the run except this lease's ``in_flight`` ones.

        Earlier owners' claims and this lease's own stale ones (a result write that failed)
        are deleted, with one ``steps_recovered`` event; returns the names, sorted.
        """
        keep = sorted(in_flight)
        return await self._write_tx(lambda tx: _recover(tx, lease, keep))
