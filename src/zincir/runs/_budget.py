"""Budgets on a run: limits on tokens, tool calls, model requests and wall time that survive
restarts, because usage is read from the run's log (each response's usage and each tool
intent are logged in the transaction that records them) and never counted a second time.

The budget in force is the latest ``budget_set`` event of the run's log: set by its owner
(``AgentContext.create(budget=)``, ``set_budget``) or from outside (:func:`set_budget`),
which also wakes a run parked because its budget ran out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

from .._errors import InvalidInput
from .._json import dumps
from .._validate import check_id, int_problem, shown
from ..store import Store, as_store
from ..store._restart_records import BUDGET_TOPIC

__all__ = [
    "BUDGET_EVENT",
    "BUDGET_TOPIC",
    "EXCEEDED_EVENT",
    "Budget",
    "BudgetUsage",
    "budget_json",
    "check_budget_arg",
    "count",
    "exceeded",
    "set_budget",
]

BUDGET_EVENT: Final = "budget_set"
EXCEEDED_EVENT: Final = "budget_exceeded"

Moment = Literal["model", "tools", "step"]


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on one run (None: no limit). ``on_exceed`` chooses what a run that ran out
    does: ``pause`` (parked until its budget is raised) or ``fail``."""

    tokens: int | None = None
    tool_calls: int | None = None
    model_requests: int | None = None
    wall_time: timedelta | float | None = None
    on_exceed: Literal["pause", "fail"] = "pause"

    def __post_init__(self) -> None:
        for name in ("tokens", "tool_calls", "model_requests"):
            value = getattr(self, name)
            problem = None if value is None else int_problem(name, value, minimum=0)
            if problem is not None:
                raise InvalidInput(f"Budget: {problem}")
        wall = self.wall_time
        if isinstance(wall, int | float) and not isinstance(wall, bool):
            wall = timedelta(seconds=wall)
            object.__setattr__(self, "wall_time", wall)
        if wall is not None and (not isinstance(wall, timedelta) or wall <= timedelta(0)):
            raise InvalidInput(
                f"Budget: wall_time must be a positive timedelta or seconds, not {shown(wall)}"
            )
        if self.on_exceed not in ("pause", "fail"):
            raise InvalidInput(
                f"Budget: on_exceed must be 'pause' or 'fail', not {shown(self.on_exceed)}"
            )

    @property
    def wall_limit(self) -> timedelta | None:
        """``wall_time`` as a timedelta (seconds given are converted on construction)."""
        wall = self.wall_time
        return wall if isinstance(wall, timedelta) else None

    def to_dict(self) -> dict[str, Any]:
        wall = self.wall_limit
        return {
            "tokens": self.tokens,
            "tool_calls": self.tool_calls,
            "model_requests": self.model_requests,
            "wall_time_s": None if wall is None else wall.total_seconds(),
            "on_exceed": self.on_exceed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        wall = data.get("wall_time_s")
        return cls(
            tokens=data.get("tokens"),
            tool_calls=data.get("tool_calls"),
            model_requests=data.get("model_requests"),
            wall_time=None if wall is None else timedelta(seconds=float(wall)),
            on_exceed=data.get("on_exceed", "pause"),
        )


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """What a run has spent: tokens (input + output of every logged response), tool calls
    (logged intents), model requests (logged responses) and wall time since its creation."""

    tokens: int = 0
    tool_calls: int = 0
    model_requests: int = 0
    wall_time: timedelta = timedelta(0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "tool_calls": self.tool_calls,
            "model_requests": self.model_requests,
            "wall_time_s": round(self.wall_time.total_seconds(), 3),
        }


def exceeded(budget: Budget, usage: BudgetUsage, moment: Moment) -> list[str]:
    """The limits that stop the next action: before a model request every limit spent (a
    tool budget overdrawn), before tools an overdrawn tool budget, before a step the
    wall time; wall time spent stops anything."""
    over = []
    wall = budget.wall_limit
    if wall is not None and usage.wall_time >= wall:
        over.append("wall_time")
    if budget.tool_calls is not None and usage.tool_calls > budget.tool_calls:
        over.append("tool_calls")
    if moment == "model":
        if budget.tokens is not None and usage.tokens >= budget.tokens:
            over.append("tokens")
        if budget.model_requests is not None and usage.model_requests >= budget.model_requests:
            over.append("model_requests")
    return over


def count(value: object) -> int:
    """A token counter as logged: an int, anything else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def check_budget_arg(budget: object, run_id: str | None = None) -> Budget | None:
    """``budget`` when it is a Budget or None; InvalidInput for anything else."""
    if budget is not None and not isinstance(budget, Budget):
        raise InvalidInput(f"budget must be a zincir.Budget, not {shown(budget)}", run_id=run_id)
    return budget


def budget_json(budget: Budget, run_id: str | None = None) -> str:
    return dumps(budget.to_dict(), what="a budget", run_id=run_id)


async def set_budget(store: Store, run_id: str, budget: Budget) -> int:
    """Set (raise or lower) a live run's budget from anywhere: a ``budget_set`` event in its
    log, read by its owner before its next action; a run parked because its budget ran out
    becomes claimable again. Returns the event's seq; RunNotFound / RunTerminal otherwise."""
    as_store(store)
    check_id(run_id)
    if check_budget_arg(budget, run_id) is None:
        raise InvalidInput("budget must be a zincir.Budget, not None", run_id=run_id)
    return await store.append_operator_event(run_id, BUDGET_EVENT, budget_json(budget, run_id))
