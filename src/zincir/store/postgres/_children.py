"""Child runs (PostgreSQL): an idempotent spawn keyed by (parent, spawn name), a durable join.

A spawned child is a ``pending`` run with ``parent_id`` set and no owner (created by
``insert_run``, the one way to create a run), so any ResumeWorker or ``WorkflowContext.open``
can run it. Its outcome (terminal status, JSON result, last error) never changes once
terminal, so a replayed join returns what the first one returned.
"""

from __future__ import annotations

from .._records import TERMINAL_STATUSES, Lease
from .._timers import clear_wait, set_wait
from .._workflow_records import ChildOutcome, ChildResult, WaitAttempt, child_result
from .._workflow_rules import child_not_found, child_spawned, spawn_taken
from ._base import Conn, PostgresBase
from ._log import append, insert_run
from ._tx import PostgresTx

__all__ = ["ChildOps"]

_SPAWNED = "SELECT id FROM agent_runs WHERE parent_id = %s AND spawn_name = %s"


def _child(conn: Conn, child_id: str) -> ChildResult:
    row = conn.execute(
        "SELECT status, result, last_error FROM agent_runs WHERE id = %s", (child_id,)
    ).fetchone()
    if row is None:
        raise child_not_found(child_id)
    return child_result(child_id, row)


class ChildOps(PostgresBase):
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

        def write(conn: Conn) -> str:
            found = conn.execute(_SPAWNED, (lease.run_id, spawn_name)).fetchone()
            if found is not None:
                return str(found[0])
            append(conn, lease)  # the fence, and the parent's row lock: its spawns go in turn
            found = conn.execute(_SPAWNED, (lease.run_id, spawn_name)).fetchone()
            if found is not None:  # spawned by a transaction that held the lock before
                return str(found[0])
            append(conn, lease, [child_spawned(spawn_name, child_id)])
            if not insert_run(
                conn,
                child_id,
                name=run_name,
                config_json=config_json,
                parent_id=lease.run_id,
                spawn_name=spawn_name,
            ):
                raise spawn_taken(spawn_name, child_id, lease.run_id)
            return child_id

        return await self._write(write)

    async def child_outcome(self, run_id: str, child_id: str) -> ChildOutcome:
        """Run ``child_id``'s outcome so far, and whether ``run_id``'s wait is on it.

        RunNotFound if there is no such child run.
        """

        def read(conn: Conn) -> ChildOutcome:
            child = _child(conn, child_id)
            waiting = conn.execute(
                "SELECT 1 FROM agent_runs WHERE id = %s AND wait_kind = 'child' AND wait_ref = %s",
                (run_id, child_id),
            ).fetchone()
            return ChildOutcome(child, waiting is not None)

        return await self._read(read)

    async def join_attempt(self, lease: Lease, child_id: str) -> WaitAttempt[ChildResult]:
        """Done with the child's outcome once it is terminal (clearing the wait on it);
        otherwise the lease's run records its wait on the child. Fenced either way.

        A child finishing just after the read is not missed: its terminal status is what
        the next attempt, the wait's poll and a ResumeWorker's claim all look for."""

        def write(conn: Conn) -> WaitAttempt[ChildResult]:
            child = _child(conn, child_id)
            tx = PostgresTx(conn)
            tx.append(lease)
            if child.status in TERMINAL_STATUSES:
                clear_wait(tx, lease.run_id, "child", child_id)
                return WaitAttempt(True, child)
            set_wait(tx, lease.run_id, "child", child_id, None)
            return WaitAttempt(False, child)

        return await self._write(write)
