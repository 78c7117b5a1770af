"""The inspector's database: the store layer's read-only view, and how much a page shows.

Every query lives in :mod:`zincir.store.sqlite` (``ReadOnlyDatabase``): the inspector never
creates, migrates or writes a database, and holds no SQL.
"""

from __future__ import annotations

from ..store.sqlite import ReadOnlyDatabase, SnapshotReader

__all__ = ["EVENT_PAGE_SIZE", "LIST_LIMIT", "ROW_LIMIT", "InspectorDatabase", "Reader"]

EVENT_PAGE_SIZE = 200
LIST_LIMIT = 100
ROW_LIMIT = 500  # operations, steps, timers, checkpoints, children and messages per run page

InspectorDatabase = ReadOnlyDatabase
Reader = SnapshotReader
