"""Child runs: an idempotent spawn keyed by (parent, spawn name) and a durable join.

A spawned child is a ``pending`` run with ``parent_id`` set and no owner (created by
``insert_run``, the one way to create a run), so any ResumeWorker or ``WorkflowContext.open``
can run it. Its outcome (terminal status, JSON result, last error) never changes once
terminal, so a replayed join returns what the first one returned.
"""

from __future__ import annotations

from typing import Final

from ._log import insert_run
from ._records import TERMINAL_STATUSES, Lease
from ._sql import Rules, Tx, sql
from ._timers import clear_wait, set_wait
from ._workflow_records import ChildOutcome, ChildResult, WaitAttempt, child_result
from ._workflow_rules import child_not_found, child_spawned, spawn_taken

__all__ = ["ChildOps", "child_outcome", "join_attempt", "spawn_child"]

_SPAWNED: Final = sql("SELECT id FROM agent_runs WHERE parent_id = ? AND spawn_name = ?")
_OUTCOME: Final = sql(
    "SELECT status, result, last_error FROM agent_runs WHERE id = ?", opens=(1, 2), run_param=0
)
_AWAITED: Final = sql(
    "SELECT 1 FROM agent_runs WHERE id = ? AND wait_kind = 'child' AND wait_ref = ?"
)


def _child(tx: Tx, child_id: str) -> ChildResult:
    row = tx.one(_OUTCOME, (child_id,))
    if row is None:
        raise child_not_found(child_id)
    return child_result(child_id, row)


def spawn_child(
    tx: Tx, lease: Lease, spawn_name: str, child_id: str, run_name: str, config_json: str
) -> str:
    """Create the lease's run's child ``spawn_name`` once (id ``child_id``, pending, with
    ``child_spawned``); a replay returns the first child's id without writing. RunExists if
    ``child_id`` is taken by another run."""
    found = tx.one(_SPAWNED, (lease.run_id, spawn_name))
    if found is None:
        tx.append(lease)  # the fence, and the parent's row lock: its spawns go in turn
        found = tx.one(_SPAWNED, (lease.run_id, spawn_name))
    if found is not None:  # spawned before, or by a transaction that held the lock first
        return str(found[0])
    tx.append(lease, [child_spawned(spawn_name, child_id)])
    if not insert_run(
        tx,
        child_id,
        name=run_name,
        config_json=config_json,
        parent_id=lease.run_id,
        spawn_name=spawn_name,
    ):
        raise spawn_taken(spawn_name, child_id, lease.run_id)
    return child_id


def child_outcome(tx: Tx, run_id: str, child_id: str) -> ChildOutcome:
    """Run ``child_id``'s outcome so far, and whether ``run_id``'s wait is on it."""
    child = _child(tx, child_id)
    return ChildOutcome(child, tx.one(_AWAITED, (run_id, child_id)) is not None)


def join_attempt(tx: Tx, lease: Lease, child_id: str) -> WaitAttempt[ChildResult]:
    """Done with the child's outcome once it is terminal (clearing the wait on it);
    otherwise the lease's run records its wait on the child. Fenced either way.

    A child finishing just after the read is not missed: its terminal status is what the
    next attempt, the wait's poll and a ResumeWorker's claim all look for."""
    child = _child(tx, child_id)
    tx.append(lease)
    if child.status in TERMINAL_STATUSES:
        clear_wait(tx, lease.run_id, "child", child_id)
        return WaitAttempt(True, child)
    set_wait(tx, lease.run_id, "child", child_id, None)
    return WaitAttempt(False, child)


class ChildOps(Rules):
    """Spawning and joining child runs."""

    async def spawn_child(
        self,
        lease: Lease,
        spawn_name: str,
        *,
        child_id: str,
        run_name: str,
        config_json: str = "{}",
    ) -> str:
        """Create the lease's run's child ``spawn_name`` once (id ``child_id``, pending, with
        ``child_spawned``); a replay returns the first child's id without writing.

        RunExists if ``child_id`` is taken by another run.
        """
        return await self._write_tx(
            lambda tx: spawn_child(tx, lease, spawn_name, child_id, run_name, config_json)
        )

    async def child_outcome(self, run_id: str, child_id: str) -> ChildOutcome:
        """Run ``child_id``'s outcome so far, and whether ``run_id``'s wait is on it.

        RunNotFound if there is no such child run.
        """
        return await self._read_tx(lambda tx: child_outcome(tx, run_id, child_id))

    async def join_attempt(self, lease: Lease, child_id: str) -> WaitAttempt[ChildResult]:
        """Done with the child's outcome once it is terminal (clearing the wait on it);
        otherwise the lease's run records its wait on the child. Fenced either way."""
        return await self._write_tx(lambda tx: join_attempt(tx, lease, child_id))
