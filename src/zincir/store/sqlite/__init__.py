"""The SQLite backend (APSW): the store, its writer, its migrations and its read-only view."""

from .._readonly_rows import (
    CheckpointRow,
    EventRow,
    MessageRow,
    OperationRow,
    PendingToolRow,
    StepRow,
    TimerRow,
    Usage,
    decode_json,
)
from ._base import migrations, sqlite_path_from_url
from ._readonly import ReadOnlyDatabase, SnapshotReader
from ._store import SQLiteStore

__all__ = [
    "CheckpointRow",
    "EventRow",
    "MessageRow",
    "OperationRow",
    "PendingToolRow",
    "ReadOnlyDatabase",
    "SQLiteStore",
    "SnapshotReader",
    "StepRow",
    "TimerRow",
    "Usage",
    "decode_json",
    "migrations",
    "sqlite_path_from_url",
]
