"""PostgreSQL: runs, leases and the event log."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["RunOps"]


class RunOps(PostgresBase):
    """Runs, leases and the event log."""
