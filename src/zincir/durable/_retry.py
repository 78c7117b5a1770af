"""RetryPolicy: in-place retries of retryable failures before a failure is persisted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .._errors import InvalidInput
from .._time import as_timedelta

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts at most ``max_attempts`` times, waiting ``initial_interval * backoff**n``
    (capped at ``max_interval``) between attempts, like a Temporal activity retry."""

    max_attempts: int = 3
    initial_interval: timedelta = timedelta(milliseconds=100)
    backoff: float = 2.0
    max_interval: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise InvalidInput(f"max_attempts must be an int >= 1, not {self.max_attempts!r}")
        object.__setattr__(self, "initial_interval",
                           as_timedelta(self.initial_interval, name="initial_interval"))
        object.__setattr__(self, "max_interval", as_timedelta(self.max_interval,
                                                              name="max_interval"))
        if self.initial_interval < timedelta(0) or self.max_interval < timedelta(0):
            raise InvalidInput("retry intervals must not be negative")
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, int | float) \
                or not self.backoff >= 1.0:
            raise InvalidInput(f"backoff must be a number >= 1, not {self.backoff!r}")

    def delay(self, attempt: int) -> timedelta:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        seconds = self.initial_interval.total_seconds() * self.backoff ** (attempt - 1)
        return min(timedelta(seconds=seconds), self.max_interval)

    @classmethod
    def no_retry(cls) -> RetryPolicy:
        return cls(max_attempts=1)
