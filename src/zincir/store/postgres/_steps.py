"""PostgreSQL: durable steps."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["StepOps"]


class StepOps(PostgresBase):
    """Durable steps."""
