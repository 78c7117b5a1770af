"""Child runs: an idempotent spawn keyed by (parent, spawn name) and a durable join.

A spawned child is a ``pending`` run with ``parent_id`` set and no owner, so any ResumeWorker
(or ``WorkflowContext.open``) can run it. Its outcome never changes once terminal, so a
replayed join returns what the first one returned.
"""

from __future__ import annotations

import uuid
from typing import Any

from .._errors import InvalidInput
from .._json import dumps
from .._validate import check_id
from ..store import TERMINAL_STATUSES, ChildResult
from ._core import Core

__all__ = ["ChildResult", "join_child", "spawn_child"]


async def spawn_child(
    core: Core, name: str, config: Any, run_id: str | None, run_name: str | None
) -> str:
    """Create child run ``name`` of this run once; return its id (the same id on replay)."""
    parent = core.run_id
    check_id(name, "a spawn name", run_id=parent)
    child_id = check_id(run_id, run_id=parent) if run_id is not None else str(uuid.uuid4())
    label = check_id(run_name if run_name is not None else name, "a run name", run_id=parent)
    config_json = dumps({} if config is None else config, what="the child's config", run_id=parent)
    core.check()
    return await core.store.spawn_child(
        core.lease, name, child_id=child_id, run_name=label, config_json=config_json
    )


async def join_child(core: Core, child_id: str) -> ChildResult:
    """Wait (durably) until run ``child_id`` is terminal; return its status and result."""
    parent = core.run_id
    check_id(child_id, "a child run id", run_id=parent)
    if child_id == parent:
        raise InvalidInput("a run cannot join itself", run_id=parent)
    store, lease = core.store, core.lease
    seen = await store.child_outcome(parent, child_id)
    if seen.child.status in TERMINAL_STATUSES and not seen.awaited:
        return seen.child

    async def ready() -> bool:
        return (await store.child_outcome(parent, child_id)).child.status in TERMINAL_STATUSES

    return await core.block("child", child_id, lambda: store.join_attempt(lease, child_id), ready)
