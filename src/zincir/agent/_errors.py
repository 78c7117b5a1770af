"""Errors of the agent loop, each a subclass of one in the ``zincir`` tree.

OperationFailed
└── DurableOperationFailed   a persisted failure record ended the run (``.record``)
ZincirError
└── ToolRetriesExhausted     the model kept calling a tool wrongly past the retry bound
"""

from __future__ import annotations

from .._errors import OperationFailed, ZincirError
from ..contract import Failure, Record

__all__ = ["DurableOperationFailed", "ToolRetriesExhausted"]


class DurableOperationFailed(OperationFailed):
    """A durable operation's persisted record is a failure; ``record`` is that record."""

    def __init__(self, record: Record) -> None:
        outcome = record.outcome
        assert isinstance(outcome, Failure)
        self.record = record
        super().__init__(
            outcome.error,
            outcome.retryable,
            f"{outcome.message + '; ' if outcome.message else ''}the record of "
            f"{record.invocation.step_id} #{record.invocation.sequence} is persisted, so a "
            "replay fails the same way (fix the cause and start a new run)",
            run_id=record.invocation.run_id,
        )


class ToolRetriesExhausted(ZincirError):
    """The model called an unknown tool, or a tool with invalid arguments, too many times."""
