"""Plain records the store hands to every layer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["RUN_COLUMNS", "RUN_COLUMNS_SQL", "TERMINAL_STATUSES", "Event", "RunStatus"]

RUN_COLUMNS = (
    "id", "parent_id", "spawn_name", "name", "status", "provider", "config", "result",
    "lease_owner", "lease_token", "lease_expires_at", "last_seq", "attempts",
    "next_attempt_at", "last_error", "created_at", "updated_at",
)
RUN_COLUMNS_SQL = ", ".join(RUN_COLUMNS)

RunStatus = str
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only log."""

    run_id: str
    seq: int
    type: str
    payload: Any
    created_at: datetime
