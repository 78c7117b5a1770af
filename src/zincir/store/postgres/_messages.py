"""PostgreSQL: messages between runs."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["MessageOps"]


class MessageOps(PostgresBase):
    """Messages between runs."""
