"""RetryPolicy: in-place retries of retryable failures before a failure is persisted."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from .._errors import InvalidInput
from .._validate import check_count, check_duration, shown

__all__ = ["RetryPolicy", "failure_retry_after"]

_RETRY_AFTER: Final = re.compile(r"Retry-After: ([0-9]+(?:\.[0-9]+)?) s")


def failure_retry_after(message: str | None) -> float | None:
    """The provider's ``Retry-After`` named in a failure's message (``Retry-After: <seconds>
    s``, as ``ProviderError`` and ``RetryTool`` write it), or None."""
    found = _RETRY_AFTER.findall(message or "")
    return float(found[-1]) if found else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts at most ``max_attempts`` times, waiting ``initial_interval * backoff**n``
    (capped at ``max_interval``) between attempts, like a Temporal activity retry.

    ``max_elapsed`` also stops the retries once the delays waited add up to it (the agent
    loop's durable retries honour it: the default model policy keeps retrying until at least
    10 minutes were waited, whatever its full-jitter delays drew); None leaves only
    ``max_attempts``.
    """

    max_attempts: int = 3
    initial_interval: timedelta = timedelta(milliseconds=100)
    backoff: float = 2.0
    max_interval: timedelta = timedelta(seconds=10)
    max_elapsed: timedelta | None = None

    def __post_init__(self) -> None:
        check_count(self.max_attempts, "max_attempts")
        object.__setattr__(
            self, "initial_interval", check_duration(self.initial_interval, "initial_interval")
        )
        object.__setattr__(self, "max_interval", check_duration(self.max_interval, "max_interval"))
        if self.max_elapsed is not None:
            elapsed = check_duration(self.max_elapsed, "max_elapsed")
            object.__setattr__(self, "max_elapsed", elapsed)
        if (
            isinstance(self.backoff, bool)
            or not isinstance(self.backoff, int | float)
            or not 1.0 <= self.backoff <= sys.float_info.max
        ):
            raise InvalidInput(f"backoff must be a finite number >= 1, not {shown(self.backoff)}")

    def delay(self, attempt: int) -> timedelta:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        first, cap = self.initial_interval, self.max_interval
        if first >= cap:
            return cap
        steps = attempt - 1
        if first <= timedelta(0) or steps <= 0 or self.backoff == 1:
            return first
        if steps * math.log(self.backoff) >= math.log(cap / first):
            return cap  # decided in log space: the power itself may overflow a float
        return min(first * self.backoff**steps, cap)

    def exhausted(self, attempts: int, waited: timedelta) -> bool:
        """True when no attempt follows ``attempts`` failed ones after ``waited`` in delays."""
        if attempts >= self.max_attempts:
            return True
        return self.max_elapsed is not None and waited >= self.max_elapsed

    @classmethod
    def no_retry(cls) -> RetryPolicy:
        return cls(max_attempts=1)
