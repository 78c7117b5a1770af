"""Small test helpers that read the database directly (never to fake a crash)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw


def rows(db_path: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run a read-only query on a separate connection."""
    conn = apsw.Connection(
        f"file:{db_path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def event_types(db_path: Path | str, run_id: str) -> list[str]:
    return [
        t
        for (t,) in rows(
            db_path, "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
    ]


def seqs(db_path: Path | str, run_id: str) -> list[int]:
    return [
        s
        for (s,) in rows(db_path, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    ]


def count(db_path: Path | str, table: str) -> int:
    return int(rows(db_path, f"SELECT COUNT(*) FROM {table}")[0][0])
