"""The inspector's database: the store layer's read-only view, and how much a page shows.

Every query lives in the store layer (:func:`zincir.store._readonly.open_read_only` picks a
SQLite file's or a PostgreSQL schema's view): the inspector never creates, migrates or
writes a database, and holds no SQL.
"""

from __future__ import annotations

from ..store._readonly import ReadOnlySnapshot, ReadOnlyView, open_read_only
from ..store.sqlite import ReadOnlyDatabase

__all__ = [
    "CHAT_EVENTS",
    "EVENT_PAGE_SIZE",
    "LIST_LIMIT",
    "OPERATION_PAGE",
    "ROW_LIMIT",
    "InspectorDatabase",
    "Reader",
    "View",
    "open_read_only",
]

EVENT_PAGE_SIZE = 200
LIST_LIMIT = 100
ROW_LIMIT = 500  # steps, timers, checkpoints, children and messages per run page
CHAT_EVENTS = 150  # events of a conversation window: the latest ~30 turns of an agent run
OPERATION_PAGE = 50  # operations per page, listed without their inputs and records

InspectorDatabase = ReadOnlyDatabase
"""The SQLite file's view (built from a path); any :data:`View` serves the inspector."""
View = ReadOnlyView
Reader = ReadOnlySnapshot
