"""SQLiteStore: the embedded store, every operation written once over SQLite's rule seam."""

from __future__ import annotations

from .._store_ops import StoreOps
from ._tx import SqliteRules

__all__ = ["SQLiteStore"]


class SQLiteStore(StoreOps, SqliteRules):
    """An opened, migrated SQLite database implementing every operation of ``Store``."""

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
