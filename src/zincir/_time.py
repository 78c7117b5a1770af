"""Clock, duration and timestamp helpers shared by every module.

Timestamps are stored as fixed-width UTC ISO-8601 text (``2026-01-02T03:04:05.123456Z``) so
that SQL string comparison orders them like the instants they name.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ._errors import InvalidInput

__all__ = ["Clock", "as_timedelta", "from_db", "system_clock", "to_db"]

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The machine's wall clock, timezone-aware UTC."""
    return datetime.now(UTC)


def to_db(moment: datetime) -> str:
    """Encode an aware datetime as sortable UTC text."""
    if moment.tzinfo is not UTC:
        if moment.tzinfo is None:
            raise InvalidInput("timestamps must be timezone-aware (UTC)")
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def from_db(text: str) -> datetime:
    """Decode a stored timestamp."""
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def as_timedelta(value: timedelta | float | int, *, name: str = "duration") -> timedelta:
    """Accept a timedelta or a number of seconds; reject anything else."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a datetime.timedelta or seconds, not {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidInput(f"{name} must be finite, not {value!r}")
    return timedelta(seconds=value)
