"""PostgreSQL: child runs."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["ChildOps"]


class ChildOps(PostgresBase):
    """Child runs."""
