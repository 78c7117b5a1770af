"""PostgresStore: the shared store, every operation written once over PostgreSQL's rule
seam, with its one-statement step result."""

from __future__ import annotations

from .._store_ops import StoreOps
from ._steps import PostgresStepOps
from ._tx import PostgresRules

__all__ = ["PostgresStore"]


class PostgresStore(PostgresStepOps, StoreOps, PostgresRules):
    """An opened, migrated PostgreSQL schema implementing every operation of ``Store``."""

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
