"""The fence, written once: whether a lease still owns its live run, and why not.

A write that leaves the run's row alone (a step or operation claim) checks the fence with
:func:`check_fence`; every fenced statement that matched no row asks :func:`diagnose` which
error to raise (a missing run, a finished one, or a newer owner).
"""

from __future__ import annotations

from typing import Final

from ._records import Lease
from ._run_rules import fence_error
from ._sql import Tx, sql

__all__ = ["check_fence", "diagnose"]

_HELD: Final = sql(
    "SELECT 1 FROM agent_runs WHERE id = ? AND lease_owner = ? AND lease_token = ? "
    "AND status IN ('pending', 'running'){for_share}"
)
_STATE: Final = sql("SELECT status, lease_token FROM agent_runs WHERE id = ?")


def diagnose(tx: Tx, run_id: str, token: int) -> Exception:
    """Why a fenced write matched no row: missing run, terminal run, or a newer owner."""
    return fence_error(run_id, token, tx.one(_STATE, (run_id,)))


def check_fence(tx: Tx, lease: Lease) -> None:
    """Raise unless ``lease`` still owns its live run; on PostgreSQL the run's row stays
    share-locked until COMMIT, so no new owner can take it meanwhile."""
    if tx.one(_HELD, (lease.run_id, lease.owner, lease.token)) is None:
        raise diagnose(tx, lease.run_id, lease.token)
