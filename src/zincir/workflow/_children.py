"""Child runs: an idempotent spawn keyed by (parent, spawn name) and a durable join.

A spawned child is a ``pending`` run with ``parent_id`` set and no owner, so any ResumeWorker
(or ``WorkflowContext.open``) can run it. Its outcome is its terminal status, the JSON result
given to ``complete(result)`` and, if it failed, ``last_error``; these never change once
terminal, so a replayed join returns what the first one returned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import apsw

from .._errors import InvalidInput, RunExists, RunNotFound
from .._json import dumps, loads_strict
from .._time import to_db
from ..runs._lease import check_run_id
from ..store import TERMINAL_STATUSES
from ._core import Attempt, Core, check_name, clear_wait, set_wait

__all__ = ["ChildResult", "join_child", "spawn_child"]


@dataclass(frozen=True, slots=True)
class ChildResult:
    """A child run's terminal outcome."""

    run_id: str
    status: str
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "completed"


async def spawn_child(core: Core, name: str, config: Any, run_id: str | None,
                      run_name: str | None) -> str:
    """Create child run ``name`` of this run once; return its id (the same id on replay)."""
    parent = core.run_id
    check_name(name, "a spawn name", parent)
    child_id = check_run_id(run_id) if run_id is not None else str(uuid.uuid4())
    label = check_name(run_name if run_name is not None else name, "a run name", parent)
    config_json = dumps({} if config is None else config, what="the child's config",
                        run_id=parent)

    def write(conn: apsw.Connection, now: datetime) -> str:
        found = conn.execute(
            "SELECT id FROM agent_runs WHERE parent_id = ? AND spawn_name = ?", (parent, name)
        ).fetchone()
        if found is not None:
            return str(found[0])
        core.fence(conn, now)
        stamp = to_db(now)
        try:
            conn.execute(
                "INSERT INTO agent_runs (id, parent_id, spawn_name, name, status, config, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?)",
                (child_id, parent, name, label, config_json, stamp, stamp),
            )
        except apsw.ConstraintError:
            raise RunExists(
                f"cannot spawn {name!r}: a run {child_id!r} already exists; choose another "
                "run_id or omit it",
                run_id=parent,
            ) from None
        event = {"name": name, "child_id": child_id}
        core.fence(conn, now, [("child_spawned", dumps(event), None)])
        return child_id

    return await core.write(write)


def _outcome(conn: apsw.Connection, child_id: str) -> ChildResult:
    row = conn.execute(
        "SELECT status, result, last_error FROM agent_runs WHERE id = ?", (child_id,)
    ).fetchone()
    if row is None:
        raise RunNotFound(f"cannot join: no run {child_id!r} in this store", run_id=child_id)
    status, result, error = row
    return ChildResult(child_id, status, None if result is None else loads_strict(result), error)


async def join_child(core: Core, child_id: str) -> ChildResult:
    """Wait (durably) until run ``child_id`` is terminal; return its status and result."""
    parent = core.run_id
    check_run_id(child_id)
    if child_id == parent:
        raise InvalidInput("a run cannot join itself", run_id=parent)

    def waiting_on_it(conn: apsw.Connection) -> bool:
        row = conn.execute(
            "SELECT wait_kind, wait_ref FROM agent_runs WHERE id = ?", (parent,)
        ).fetchone()
        return row is not None and tuple(row) == ("child", child_id)

    def peek(conn: apsw.Connection) -> tuple[ChildResult, bool]:
        return _outcome(conn, child_id), waiting_on_it(conn)

    outcome, waiting = await core.read(peek)
    if outcome.status in TERMINAL_STATUSES and not waiting:
        return outcome

    def attempt(conn: apsw.Connection, now: datetime) -> Attempt[ChildResult]:
        outcome = _outcome(conn, child_id)
        core.fence(conn, now)
        if outcome.status in TERMINAL_STATUSES:
            clear_wait(conn, parent, "child", child_id)
            return True, outcome, None
        set_wait(conn, parent, "child", child_id, None)
        return False, outcome, None

    def ready(conn: apsw.Connection) -> bool:
        return _outcome(conn, child_id).status in TERMINAL_STATUSES

    return await core.block("child", child_id, attempt, ready)
