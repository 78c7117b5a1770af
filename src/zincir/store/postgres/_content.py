"""The conversion of PostgreSQL's rows of the former format to content stored once (the
rules are in ``.._content``, the writes and reads in ``.._content_rows``)."""

from __future__ import annotations

from typing import Final

from .._content import CONVERT_BATCH, convert_stored_row
from .._content_rows import INSERT, REFER
from ._base import Conn

__all__ = ["convert_rows"]

_CONVERT: Final = {
    "select": "SELECT input_json, record FROM operations "
    "WHERE run_id = %s AND step_id = %s AND sequence = %s FOR UPDATE",
    "insert": INSERT.postgres,
    "refer": REFER.postgres,
    "update": "UPDATE operations SET input_json = %s, input_parts = %s, record = %s "
    "WHERE run_id = %s AND step_id = %s AND sequence = %s",
}
"""The statements converting one row written whole (see .._content.convert_stored_row)."""
_BATCH_CHARS: Final = 32 * 1024 * 1024


def convert_rows(conn: Conn) -> int:
    """Convert every row written whole to content stored once, a bounded batch per
    transaction (a row already converted is skipped, so a killed run resumes); how many.
    ``conn`` is in autocommit mode."""
    converted = 0
    after: tuple[str, str, int] = ("", "", -1)
    while True:
        with conn.transaction():
            keys = conn.execute(
                "SELECT run_id, step_id, sequence, length(input_json) + "
                "coalesce(length(record), 0) FROM operations WHERE input_parts IS NULL "
                "AND (run_id, step_id, sequence) > (%s, %s, %s) "
                "ORDER BY run_id, step_id, sequence LIMIT %s",
                (*after, CONVERT_BATCH),
            ).fetchall()
            total = 0
            for run_id, step_id, sequence, size in keys:
                after = (str(run_id), str(step_id), int(sequence))
                converted += _convert(conn, after)
                total += int(size or 0)
                if total > _BATCH_CHARS:
                    break
        if not keys:
            return converted


def _convert(conn: Conn, key: tuple[str, str, int]) -> int:
    return convert_stored_row(conn.execute, conn.cursor().executemany, key, **_CONVERT)
