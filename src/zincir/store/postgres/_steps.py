"""PostgreSQL's own path for a step's result: one statement, no transaction round trips.

The rules are the shared ones (``store/_steps.py``): this only replaces the fenced append
and the claim's pointer with :data:`~._log.STEP_RESULT`, which does both in one ``WITH``.
"""

from __future__ import annotations

from ..._encryption import Sealer
from .._fence import diagnose
from .._records import Lease
from .._steps import CLAIM, StepOps, claim_params
from .._workflow_rules import step_claim_released, step_completed
from ._base import CheckFailed, Conn, PostgresBase
from ._log import STEP_RESULT
from ._tx import PostgresTx

__all__ = ["PostgresStepOps"]


def _result_params(
    lease: Lease, name: str, result_json: str, sealer: Sealer | None
) -> dict[str, object]:
    """The parameters of :data:`STEP_RESULT` for ``lease``'s result of step ``name`` (its
    payload sealed in an encrypted store)."""
    payload = step_completed(name, result_json).payload_json
    return {
        "run": lease.run_id,
        "name": name,
        "owner": lease.owner,
        "token": lease.token,
        "ttl": lease.ttl,
        "payload": payload if sealer is None else sealer.seal(payload),
    }


def _fenced(conn: Conn, lease: Lease) -> Exception:
    """Why ``lease`` can no longer write its run (FencedOut, RunTerminal, ...)."""
    return diagnose(PostgresTx(conn), lease.run_id, lease.token)


class PostgresStepOps(StepOps, PostgresBase):
    """The shared step operations, with a step's result written as one statement."""

    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int:
        try:
            row = await self._write_one(
                STEP_RESULT, _result_params(lease, name, result_json, self.sealer)
            )
        except CheckFailed:
            raise step_claim_released(lease.run_id, name) from None
        if row is None:  # the fence failed: nothing was stored; say why
            raise await self._read(lambda conn: _fenced(conn, lease))
        return int(row[0])

    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        params = _result_params(lease, name, result_json, self.sealer)

        def write(conn: Conn) -> bool:
            if conn.execute(STEP_RESULT, params).fetchone() is None:
                raise _fenced(conn, lease)  # nothing was stored; say why
            return (
                conn.execute(CLAIM.postgres, claim_params(lease, next_name)).fetchone() is not None
            )

        try:
            return await self._write(write)
        except CheckFailed:
            raise step_claim_released(lease.run_id, name) from None
