"""The embedded store: ``open_store`` picks the backend from the path or URL."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Literal

from .._errors import InvalidInput
from .._time import Clock
from ._models import TERMINAL_STATUSES, Event, one, scalar
from ._sqlite import SQLiteStore, migrations, sqlite_path_from_url

__all__ = [
    "TERMINAL_STATUSES", "Event", "SQLiteStore", "Store", "migrations", "one", "open_store",
    "scalar",
]

Store = SQLiteStore


def default_database_path() -> str:
    """``$ZINCIR_DATABASE_PATH``, else ``./zincir.db``."""
    return os.environ.get("ZINCIR_DATABASE_PATH") or "zincir.db"


def open_store(
    url_or_path: str | os.PathLike[str] | None = None,
    *,
    synchronous: Literal["full", "normal"] = "full",
    busy_timeout: timedelta | float = timedelta(seconds=30),
    clock: Clock | None = None,
) -> SQLiteStore:
    """Open and migrate a store at a path or ``sqlite:///path`` (default $ZINCIR_DATABASE_PATH)."""
    target = os.fspath(url_or_path) if url_or_path is not None else default_database_path()
    if target.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(
            "the PostgreSQL store is not available in this version; use a SQLite path"
        )
    return SQLiteStore(
        sqlite_path_from_url(target), synchronous=synchronous, busy_timeout=busy_timeout,
        clock=clock,
    )
