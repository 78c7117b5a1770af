"""A pydantic-ai run as a zincir run: created on the first call, taken over after a crash, its
lease held while the run executes; the per-step sequence counters live here."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..._errors import RunExists
from ...runs import AgentContext
from ...store import TERMINAL_STATUSES, Store
from ...store._run_rules import terminal_error

__all__ = ["CURRENT_RUN", "RunScope", "open_run"]


@dataclass(eq=False)
class RunScope:
    """One executing run: its lease (None while replaying a completed run, when nothing may
    execute) and the next sequence of each step, claimed in encounter order."""

    run_id: str
    agent: str
    ctx: AgentContext | None
    counters: dict[str, int] = field(default_factory=dict)
    terminal: list[BaseException] = field(default_factory=list)

    def claim(self, step_id: str) -> int:
        """The next sequence of ``step_id`` in this run (deterministic: tools run one at a time)."""
        sequence = self.counters.get(step_id, 0)
        self.counters[step_id] = sequence + 1
        return sequence

    def is_terminal(self, error: BaseException) -> bool:
        """Whether ``error`` came from a non-retryable failure record (the run then fails)."""
        return any(error is known for known in self.terminal)


CURRENT_RUN: ContextVar[RunScope | None] = ContextVar("zincir_pydantic_ai_run", default=None)


async def open_run(
    store: Store,
    run_id: str,
    *,
    agent: str,
    config: dict[str, Any],
    lease_ttl: timedelta,
    parent_id: str | None,
    app_version: str | None = None,
) -> RunScope:
    """Create the run or take it over (``LeaseHeld`` while another process owns it); a
    completed run is opened for replay only, a failed or cancelled one is refused."""
    row = await store.get_run(run_id)
    if row is not None and row["status"] == "completed":
        return RunScope(run_id, agent, None)
    if row is not None and row["status"] in TERMINAL_STATUSES:
        raise terminal_error(run_id, row["status"], "; start a new run id to try again")
    if parent_id is not None and await store.get_run(parent_id) is None:
        parent_id = None
    ctx: AgentContext | None = None
    if row is None:
        try:
            ctx = await AgentContext.create(
                store,
                name=agent,
                provider="pydantic-ai",
                config=config,
                lease_ttl=lease_ttl,
                run_id=run_id,
                parent_id=parent_id,
                app_version=app_version,
            )
        except RunExists:
            ctx = None
    if ctx is None:
        ctx = await AgentContext.recover(store, run_id, lease_ttl=lease_ttl)
    return RunScope(run_id, agent, ctx)
