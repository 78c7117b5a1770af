"""PostgreSQL: restart checkpoints."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["RestartOps"]


class RestartOps(PostgresBase):
    """Restart checkpoints."""
