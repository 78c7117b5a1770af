"""The typed records of the workflow operations: steps, timers, waits, messages, child runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, Literal, TypeVar

from .._json import loads_strict
from ._records import TimeDecoder, driver_time, optional_time

__all__ = [
    "MESSAGE_COLUMNS",
    "MESSAGE_PAYLOAD",
    "ChildOutcome",
    "ChildResult",
    "ReceivedMessage",
    "StepClaim",
    "TimerRecord",
    "WaitAttempt",
    "child_result",
    "received_message",
    "timer_record",
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


def timer_record(
    run_id: str, name: str, row: Sequence[Any], time: TimeDecoder = driver_time
) -> TimerRecord:
    """Timer ``name`` of ``run_id`` from its stored (wake_at, completed_at)."""
    wake_at, completed_at = row
    return TimerRecord(run_id, name, time(wake_at), optional_time(completed_at, time))


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


MESSAGE_COLUMNS: Final = "id, to_run_id, topic, payload, from_run_id, send_key, created_at"
"""The ``messages`` columns :func:`received_message` reads, in order."""
MESSAGE_PAYLOAD: Final = 3
"""The position of ``payload`` among :data:`MESSAGE_COLUMNS` (sealed in an encrypted store)."""


def received_message(row: Sequence[Any], time: TimeDecoder = driver_time) -> ReceivedMessage:
    """A message selected as :data:`MESSAGE_COLUMNS`, its payload decoded."""
    mid, to, topic, payload, sender, key, created = row
    return ReceivedMessage(mid, to, topic, loads_strict(payload), sender, key, time(created))


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


def child_result(child_id: str, row: Sequence[Any]) -> ChildResult:
    """Child run ``child_id``'s outcome from its stored (status, result, last_error)."""
    status, result, error = row
    return ChildResult(child_id, status, None if result is None else loads_strict(result), error)


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """A child run's current outcome, and whether the parent's recorded wait is on it."""

    child: ChildResult
    awaited: bool
