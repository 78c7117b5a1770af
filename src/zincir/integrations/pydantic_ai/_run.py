"""A pydantic-ai run as a zincir run: created on the first call, taken over after a crash, its
lease held while the run executes; the per-step sequence counters live here.

Tool calls run in parallel, so their units cannot take sequences in the order they start.
Each call has a position instead: the first time a unit of any call of a model response is
met, every call of that response takes the next value of the run's call counter, in the
response's order. The response is on record, so a replay gives each call the same position,
whatever order its siblings start or finish in. A unit of the call takes its position (a
retry adds ``round << 32``), and a unit its body starts (a wait, a workspace operation)
takes a sequence derived from the call's sequence and its own count within that body.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelResponse

from ..._errors import InvalidInput, RunExists
from ...runs import AgentContext
from ...store import TERMINAL_STATUSES, Store
from ...store._run_rules import terminal_error

__all__ = ["CURRENT_RUN", "NESTED", "RunScope", "open_run"]

ROUND_SHIFT: Final = 32
"""A call's retry round ``r`` runs under ``position | r << 32``: never another call's position."""
NESTED: Final = 1 << 61
"""Sequences of the units a call's body starts: ``NESTED | call sequence << 20 | count``."""
_NESTED_COUNT: Final = 1 << 20


@dataclass(eq=False)
class RunScope:
    """One executing run: its lease (None while replaying a completed run, when nothing may
    execute) and the next sequence of each step, claimed in encounter order."""

    run_id: str
    agent: str
    ctx: AgentContext | None
    counters: dict[str, int] = field(default_factory=dict)
    terminal: list[BaseException] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    nested: Counter[tuple[int, str]] = field(default_factory=Counter)

    def claim(self, step_id: str) -> int:
        """The next sequence of ``step_id``: in encounter order at the run's level, or, inside
        the body of a tool call's unit, counted within that body (its siblings run alongside)."""
        parent = CURRENT_CALL.get()
        if parent is None:
            return self._next(step_id)
        return self.within(parent, step_id)

    def within(self, call_sequence: int, step_id: str) -> int:
        """The next sequence of ``step_id`` counted within tool call ``call_sequence``."""
        count = self.nested[call_sequence, step_id]
        if count >= _NESTED_COUNT or call_sequence >= NESTED >> 20:
            raise InvalidInput(
                f"tool call #{call_sequence} started more units of {step_id} than zincir "
                "numbers (2**20 per call, 2**9 retry rounds)",
                run_id=self.run_id,
            )
        self.nested[call_sequence, step_id] = count + 1
        return NESTED | call_sequence << 20 | count

    def _next(self, step_id: str) -> int:
        sequence = self.counters.get(step_id, 0)
        self.counters[step_id] = sequence + 1
        return sequence

    def call_position(
        self, call_id: str | None, messages: Sequence[ModelMessage], counter: str
    ) -> int | None:
        """The position of tool call ``call_id``; None for a call no model response of
        ``messages`` holds once (its units then take ``counter``'s sequences as they start)."""
        if call_id is None:
            return None
        known = self.positions.get(call_id)
        if known is not None:
            return known
        for message in reversed(messages):
            if not isinstance(message, ModelResponse):
                continue
            ids = [call.tool_call_id for call in message.tool_calls]
            if call_id not in ids:
                continue
            repeated = {one for one in ids if ids.count(one) > 1}
            for one in ids:
                if one not in repeated and one not in self.positions:
                    self.positions[one] = self._next(counter)
            return self.positions.get(call_id)
        return None

    def is_terminal(self, error: BaseException) -> bool:
        """Whether ``error`` came from a non-retryable failure record (the run then fails)."""
        return any(error is known for known in self.terminal)


CURRENT_RUN: ContextVar[RunScope | None] = ContextVar("zincir_pydantic_ai_run", default=None)
CURRENT_CALL: ContextVar[int | None] = ContextVar("zincir_pydantic_ai_call", default=None)
"""The sequence of the tool call whose unit body is running, if any."""


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
