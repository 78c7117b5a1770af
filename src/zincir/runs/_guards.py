"""What a run's owner folds from its log to judge its guardrails: the budget in force and
the usage so far, and the counts spin detection judges. Folded once, then from each event
appended after, so nothing is counted twice however often the run restarts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from .._errors import BudgetExceeded
from .._time import from_db
from ..store import Event
from ._budget import BUDGET_EVENT, Budget, BudgetUsage, Moment, count, exceeded
from ._spin import SpinTracker

__all__ = ["Guards"]


class Guards:
    """The budget in force, the usage so far and the spin counts of one run."""

    def __init__(self) -> None:
        self.budget: Budget | None = None
        self.tokens = 0
        self.tool_calls = 0
        self.model_requests = 0
        self.seq = 0
        self.created_at: datetime | None = None
        self.read_at = 0.0  # time.monotonic() of the last read of the log
        self.spin = SpinTracker()

    def fold(self, events: Iterable[Event]) -> None:
        for event in events:
            if event.seq <= self.seq:
                continue
            self.seq = event.seq
            self.spin.fold((event,))
            payload = event.payload if isinstance(event.payload, dict) else {}
            if event.type == "llm_call":
                self.model_requests += 1
                usage = payload.get("usage") or {}
                self.tokens += count(usage.get("input_tokens")) + count(usage.get("output_tokens"))
            elif event.type == "tool_call":
                self.tool_calls += 1
            elif event.type == BUDGET_EVENT:
                self.budget = Budget.from_dict(payload)

    def usage(self, now: datetime) -> BudgetUsage:
        started = self.created_at or now
        return BudgetUsage(
            self.tokens, self.tool_calls, self.model_requests, max(now - started, timedelta(0))
        )

    def check(self, now: datetime, moment: Moment, run_id: str) -> BudgetExceeded | None:
        """The error of a run whose budget stops its next action, else None."""
        if self.budget is None:
            return None
        usage = self.usage(now)
        over = exceeded(self.budget, usage, moment)
        if not over:
            return None
        return BudgetExceeded(self.budget, usage, over, run_id=run_id)

    def start(self, created_at: str | datetime) -> None:
        """The run's creation time (stored text, or as a datetime), where wall time starts."""
        self.created_at = from_db(created_at) if isinstance(created_at, str) else created_at
