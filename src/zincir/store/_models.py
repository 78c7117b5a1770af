"""Plain records the store hands to every layer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import apsw

__all__ = [
    "RUN_COLUMNS", "RUN_COLUMNS_SQL", "TERMINAL_STATUSES", "Event", "RunStatus", "one", "scalar",
]

RUN_COLUMNS = (
    "id", "parent_id", "spawn_name", "name", "status", "provider", "config", "result",
    "lease_owner", "lease_token", "lease_expires_at", "last_seq", "attempts",
    "next_attempt_at", "last_error", "wait_kind", "wait_ref", "wait_until", "created_at",
    "updated_at",
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


def one(conn: apsw.Connection, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """The single row a statement must return (an INSERT/UPDATE … RETURNING, an aggregate)."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise LookupError(f"no row from: {sql}")
    return tuple(row)


def scalar(conn: apsw.Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the single row a statement must return."""
    return one(conn, sql, params)[0]
