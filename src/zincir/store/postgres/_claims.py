"""PostgreSQL: claims of abandoned runs (ResumeWorker)."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["ClaimOps"]


class ClaimOps(PostgresBase):
    """Claims of abandoned runs (ResumeWorker)."""
