"""PostgreSQL: operation records."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["OperationOps"]


class OperationOps(PostgresBase):
    """Operation records."""
