"""PostgreSQL: timers and waits."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["TimerOps"]


class TimerOps(PostgresBase):
    """Timers and waits."""
