"""PostgreSQL: model responses, tool intents and semantic checkpoints."""

from __future__ import annotations

from ._base import PostgresBase

__all__ = ["AgentOps"]


class AgentOps(PostgresBase):
    """Model responses, tool intents and semantic checkpoints."""
