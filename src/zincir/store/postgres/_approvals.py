"""PostgreSQL: approvals a person answers later."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["ApprovalOps"]


class ApprovalOps(PostgresBase):
    """Approvals a person answers later."""
