"""PostgreSQL: LangGraph checkpoints, writes and thread leases."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["LangGraphOps"]


class LangGraphOps(PostgresBase):
    """LangGraph checkpoints, writes and thread leases."""
