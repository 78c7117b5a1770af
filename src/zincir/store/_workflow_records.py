"""The typed records of the workflow operations: steps, timers, waits, messages, child runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "ChildOutcome",
    "ChildResult",
    "ReceivedMessage",
    "StepClaim",
    "TimerRecord",
    "WaitAttempt",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StepClaim:
    """What claiming a step found.

    ``claimed``: the caller holds the claim and runs the body; ``completed``: ``result`` is
    the stored value; ``held``: another claim (``owner``, ``token``) has not finished.
    """

    status: Literal["claimed", "completed", "held"]
    result: Any = None
    owner: str | None = None
    token: int | None = None


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """A stored timer of a run: its absolute wake time and when it fired, if it did."""

    run_id: str
    name: str
    wake_at: datetime
    completed_at: datetime | None

    @property
    def completed(self) -> bool:
        return self.completed_at is not None


@dataclass(frozen=True, slots=True)
class WaitAttempt(Generic[T]):
    """One fenced attempt to resolve a wait (sleep, receive, join).

    ``done`` with its ``value``, or not done: the wait was recorded on the run, until
    ``deadline`` if it has one.
    """

    done: bool
    value: T
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A delivered message (what ``recv_message`` returns): its payload and its origin."""

    id: int
    to_run_id: str
    topic: str
    payload: Any
    from_run_id: str | None
    key: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ChildResult:
    """A child run's outcome: its status, the JSON result it completed with, its error."""

    run_id: str
    status: str
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """A child run's current outcome, and whether the parent's recorded wait is on it."""

    child: ChildResult
    awaited: bool
