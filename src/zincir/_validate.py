"""Every check of caller input, once: ids, names, sequences, counts and durations.

Each rule has two forms: a ``*_problem`` function that says what is wrong (or None), used
where several problems are gathered into one message (an invocation), and a ``check_*``
function that raises :class:`~zincir.InvalidInput` naming the run. Every layer (runs,
workflows, runtimes, the contract, the CLI) calls these, so one value is accepted or
refused the same way everywhere, before anything is written.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from ._errors import InvalidInput, InvalidLeaseTtl

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "MAX_COUNT",
    "MAX_DURATION",
    "MAX_ID_BYTES",
    "MAX_SEQUENCE",
    "MIN_LEASE_TTL",
    "check_count",
    "check_duration",
    "check_id",
    "check_lease_ttl",
    "check_optional_id",
    "check_positive_duration",
    "check_sequence",
    "int_problem",
    "name_problem",
    "printable",
    "shown",
    "utf8",
]

MAX_ID_BYTES: Final = 256
"""Bound on the UTF-8 size of every id and name (run, step, handler, tool call, timer, topic)."""

MAX_SEQUENCE: Final = 2**63 - 1
"""Largest sequence or count: it must fit a signed 64-bit database column."""

MAX_COUNT: Final = MAX_SEQUENCE

MAX_DURATION: Final = timedelta(days=36_500)
"""The longest duration zincir stores (100 years): any instant it produces stays representable."""

MIN_LEASE_TTL: Final = timedelta(milliseconds=30)

DEFAULT_POLL_INTERVAL: Final = timedelta(milliseconds=200)
"""How often a waiter looks again when nothing wakes it (workflows, runtimes, workers)."""

# C0 controls, DEL and C1 controls.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def utf8(value: str) -> bytes | None:
    """The UTF-8 bytes of ``value``, or None when it holds lone surrogates."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        return None


def utf8_size(value: str) -> int | None:
    """How many bytes ``value`` is as UTF-8 (its length when ASCII, known without a pass),
    or None when it holds lone surrogates."""
    if value.isascii():
        return len(value)
    data = utf8(value)
    return None if data is None else len(data)


def printable(text: str) -> str:
    """``text`` with lone surrogates escaped, so it is valid UTF-8 (error descriptions)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: object, limit: int = 60) -> str:
    """A short repr of a rejected value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_problem(what: str, value: object, *, max_bytes: int = MAX_ID_BYTES) -> str | None:
    """Why ``value`` is not a valid id or name (None when it is): non-empty text of at most
    ``max_bytes`` UTF-8 bytes, without lone surrogates or control characters."""
    if not isinstance(value, str):
        return f"{what} must be a str, got {type(value).__name__}"
    if value.isascii() and value.isprintable() and 0 < len(value) <= max_bytes:
        return None  # the common case, decided without encoding or a regex
    data = utf8(value)
    if data is None:
        return f"{what} is not valid UTF-8 text (it holds a lone surrogate)"
    if not data:
        return f"{what} must not be empty"
    if len(data) > max_bytes:
        return f"{what} is {len(data)} bytes in UTF-8; the limit is {max_bytes}"
    control = _CONTROL.search(value)
    if control is not None:
        return f"{what} holds the control character {control.group()!r}; remove it"
    return None


def int_problem(
    what: str, value: object, *, minimum: int = 0, maximum: int = MAX_SEQUENCE
) -> str | None:
    """Why ``value`` is not an int in ``minimum..maximum`` (None when it is); bool is no int."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{what} must be an int, got {type(value).__name__}"
    if not minimum <= value <= maximum:
        top = "2**63-1" if maximum == MAX_SEQUENCE else str(maximum)
        return f"{what} must be in {minimum}..{top}, got {shown(value)}"
    return None


def check_id(value: object, what: str = "a run id", *, run_id: str | None = None) -> str:
    """An id or name that passes :func:`name_problem`, else InvalidInput."""
    problem = name_problem(what, value)
    if problem is not None:
        shown_run = run_id if run_id is not None and name_problem("", run_id) is None else None
        raise InvalidInput(problem, run_id=shown_run)
    assert isinstance(value, str)
    return value


def check_optional_id(value: object, what: str, *, run_id: str | None = None) -> str | None:
    """None, or an id that passes :func:`check_id`."""
    return None if value is None else check_id(value, what, run_id=run_id)


def check_sequence(value: object, what: str = "sequence", *, run_id: str | None = None) -> int:
    """An int in 0..2**63-1, else InvalidInput."""
    problem = int_problem(what, value)
    if problem is not None:
        raise InvalidInput(problem, run_id=run_id)
    assert isinstance(value, int)
    return value


def check_count(
    value: object,
    what: str,
    *,
    minimum: int = 1,
    maximum: int = MAX_COUNT,
    run_id: str | None = None,
) -> int:
    """An int in ``minimum..maximum`` (a limit, a concurrency, a number of attempts)."""
    problem = int_problem(what, value, minimum=minimum, maximum=maximum)
    if problem is not None:
        raise InvalidInput(problem, run_id=run_id)
    assert isinstance(value, int)
    return value


def check_duration(
    value: object,
    what: str = "duration",
    *,
    run_id: str | None = None,
    minimum: timedelta = timedelta(0),
    maximum: timedelta = MAX_DURATION,
) -> timedelta:
    """A ``timedelta`` or a finite number of seconds, within ``minimum..maximum``."""
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(
            f"{what} must be a datetime.timedelta or a number of seconds, not {shown(value)}",
            run_id=run_id,
        )
    elif (
        value != value or not -MAX_DURATION.total_seconds() <= value <= MAX_DURATION.total_seconds()
    ):
        raise InvalidInput(
            f"{what} must be a finite number of seconds of at most "
            f"{MAX_DURATION.days} days, not {shown(value)}",
            run_id=run_id,
        )
    else:
        duration = timedelta(seconds=value)
    if duration < minimum:
        floor = "negative" if minimum == timedelta(0) else f"below {minimum}"
        raise InvalidInput(
            f"{what} must not be {floor}, not {duration.total_seconds():g} s", run_id=run_id
        )
    if duration > maximum:
        raise InvalidInput(
            f"{what} must be at most {maximum} ({maximum.days} days), not {shown(value)}",
            run_id=run_id,
        )
    return duration


def check_positive_duration(value: object, what: str, *, run_id: str | None = None) -> timedelta:
    """A duration above zero (an interval, a TTL, a timeout)."""
    duration = check_duration(value, what, run_id=run_id)
    if duration <= timedelta(0):
        raise InvalidInput(
            f"{what} must be positive, not {duration.total_seconds():g} s", run_id=run_id
        )
    return duration


def check_lease_ttl(value: object, *, run_id: str | None = None) -> timedelta:
    """A lease TTL of at least 30 ms (InvalidLeaseTtl otherwise)."""
    try:
        ttl = check_duration(value, "lease_ttl", run_id=run_id)
    except InvalidInput as error:
        raise InvalidLeaseTtl(error.detail, run_id=error.run_id) from None
    if ttl < MIN_LEASE_TTL:
        raise InvalidLeaseTtl(
            f"lease_ttl {ttl.total_seconds() * 1000:g} ms is below the 30 ms floor; "
            "use seconds in production",
            run_id=run_id,
        )
    return ttl
