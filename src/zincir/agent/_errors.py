"""Errors of the agent loop, each a subclass of one in the ``zincir`` tree.

OperationFailed
└── DurableOperationFailed   a persisted failure record ended the run (``.record``)
ZincirError
├── ToolRetriesExhausted     the model kept calling a tool wrongly past the retry bound
├── ToolPolicyFailed         a tool policy raised or returned what cannot be used
└── RunNotResumable          a Runner cannot resume this run (another agent's, no prompt)
"""

from __future__ import annotations

from .._errors import OperationFailed, ZincirError
from ..contract import Failure, Record
from ._describe import describe_operation, failure_advice

__all__ = [
    "DurableOperationFailed",
    "RunNotResumable",
    "ToolPolicyFailed",
    "ToolRetriesExhausted",
]


class DurableOperationFailed(OperationFailed):
    """A durable operation's persisted record is a failure; ``record`` is that record.

    The message names the operation as the conversation knows it ("tool call 'lookup'
    (call id 'c1') of model request 2") and what a user can do.
    """

    def __init__(self, record: Record) -> None:
        outcome = record.outcome
        assert isinstance(outcome, Failure)
        self.record = record
        invocation = record.invocation
        super().__init__(
            outcome.error,
            outcome.retryable,
            f"{outcome.message + '; ' if outcome.message else ''}{describe_operation(invocation)} "
            "failed and its failure is recorded, so running this run id again fails the same "
            f"way: {failure_advice(invocation, outcome.error, outcome.retryable)} (a new run id)",
            run_id=invocation.run_id,
        )


class ToolRetriesExhausted(ZincirError):
    """The model called an unknown tool, or a tool with invalid arguments, too many times."""


class ToolPolicyFailed(ZincirError):
    """A tool policy raised, or returned arguments or a result that cannot be used; names
    the ``tool`` and the ``policy``. A policy is the application's code, so the run stops
    instead of telling the model."""

    def __init__(self, message: str, *, run_id: str | None = None, tool: str, policy: str) -> None:
        super().__init__(message, run_id=run_id)
        self.tool = tool
        self.policy = policy


class RunNotResumable(ZincirError):
    """A Runner cannot resume the run: it belongs to an agent the runner does not serve, or
    it was stored without its prompt (before agent runs kept it)."""
