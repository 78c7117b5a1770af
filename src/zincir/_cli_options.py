"""Options every ``zincir`` command shares, defined once: ``--db`` has one meaning everywhere.

``--db PATH`` names the zincir database: a SQLite file path, ``sqlite:///PATH`` or a
``postgresql://`` URL, by default ``$ZINCIR_DATABASE_PATH``, else ``./zincir.db``. It must be
text (a path that is not valid UTF-8 is refused with a usage error, not a traceback).
``--key-file PATH`` names the JSON key file of an encrypted store (by default the keys in
``$ZINCIR_ENCRYPTION_KEYS``, if set); keys are never printed, only their ids.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import click

from ._encryption import KEYS_ENV, Encryption
from ._validate import MAX_DURATION, utf8
from .store import default_database_path
from .store._readonly import ReadOnlyView, open_read_only

__all__ = [
    "DATABASE_ENV",
    "DatabaseLocation",
    "Seconds",
    "database_option",
    "key_file_option",
    "keys_from",
    "read_only_database",
]

F = TypeVar("F", bound=Callable[..., Any])

DATABASE_ENV = "ZINCIR_DATABASE_PATH"


class DatabaseLocation(click.types.StringParamType):
    """A database path, ``sqlite:///PATH`` or ``postgresql://`` URL: non-empty UTF-8 text
    without NUL."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        text: str = super().convert(value, param, ctx)
        if not text:
            self.fail("the database path is empty", param, ctx)
        if "\x00" in text:
            self.fail("the database path holds a NUL character", param, ctx)
        if utf8(text) is None:
            self.fail(
                f"the path {text!r} is not valid UTF-8 text; rename the file or folder",
                param,
                ctx,
            )
        return text


class Seconds(click.types.FloatParamType):
    """A finite number of seconds within bounds (NaN, infinities and durations past what a
    ``timedelta`` holds are usage errors, not tracebacks)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, maximum: timedelta = MAX_DURATION) -> None:
        self.minimum = minimum
        self.maximum = maximum.total_seconds()

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number) or not self.minimum <= number <= self.maximum:
            self.fail(
                f"{value!r} is not a number of seconds from {self.minimum:g} to {self.maximum:g}",
                param,
                ctx,
            )
        return number


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """An age such as ``30d``, ``12h``, ``90m``, ``45s`` or a plain number of seconds."""

    name = "duration"
    _UNITS: ClassVar[dict[str, float]] = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        unit = self._UNITS.get(text[-1:], None) if text else None
        number = text[:-1] if unit is not None else text
        try:
            amount = float(number) * (unit or 1)
        except ValueError:
            amount = math.nan
        if not math.isfinite(amount) or not 0 <= amount <= MAX_DURATION.total_seconds():
            self.fail(
                f"{value!r} is not a duration such as 30d, 12h, 90m, 45s (at most "
                f"{MAX_DURATION.days} days)",
                param,
                ctx,
            )
        return timedelta(seconds=amount)


def database_option(command: F) -> F:
    """Add ``--db PATH`` (passed as ``database``) to a click command."""
    option = click.option(
        "--db",
        "database",
        type=DatabaseLocation(),
        metavar="PATH",
        default=default_database_path,
        show_default=False,
        help="The zincir database: a SQLite file, sqlite:///PATH or postgresql://URL "
        f"(default: ${DATABASE_ENV}, else ./zincir.db).",
    )
    return option(command)


def key_file_option(command: F) -> F:
    """Add ``--key-file PATH`` (passed as ``key_file``, None when absent) to a click command."""
    option = click.option(
        "--key-file",
        "key_file",
        type=click.Path(dir_okay=False, path_type=str),
        metavar="PATH",
        default=None,
        help="The JSON key file of an encrypted database (default: the keys in "
        f"${KEYS_ENV}, if set); without keys, payloads show as sealed.",
    )
    return option(command)


def keys_from(key_file: str | None) -> Encryption | None:
    """The keys of ``--key-file`` (InvalidInput naming the file, never a key, when it cannot
    be read), or None: the store then takes those of ``$ZINCIR_ENCRYPTION_KEYS``, if set."""
    return None if key_file is None else Encryption.from_file(key_file)


def read_only_database(location: str, key_file: str | None = None) -> ReadOnlyView:
    """The read-only view of the database at ``--db`` for the commands that only read it
    (``runs list``, ``runs show``, ``threads``, ``ui``): a SQLite file or a PostgreSQL
    schema, never created, migrated or written; ``key_file`` opens an encrypted one's
    payloads."""
    return open_read_only(location, encryption=keys_from(key_file))
