"""The PostgreSQL statements of content stored once (the rules are in ``.._content``): writing
an input's new pieces, reading pieces back, and converting rows of the former format."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from ..._crash import crash_point
from .._content import CONVERT_BATCH, SWEEP_RUN_CONTENT, InputPlan, convert_stored_row
from ._base import Conn

__all__ = ["SWEEP", "convert_rows", "reader", "write_content", "write_rows"]

SWEEP: Final = SWEEP_RUN_CONTENT.format(param="%s")
_INSERT: Final = "INSERT INTO content (hash, body) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING"
_REFER: Final = "INSERT INTO content_refs (run_id, hash) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_CONVERT: Final = {
    "select": "SELECT input_json, record FROM operations "
    "WHERE run_id = %s AND step_id = %s AND sequence = %s FOR UPDATE",
    "insert": _INSERT,
    "refer": _REFER,
    "update": "UPDATE operations SET input_json = %s, input_parts = %s, record = %s "
    "WHERE run_id = %s AND step_id = %s AND sequence = %s",
}
"""The statements converting one row written whole (see .._content.convert_stored_row)."""
_BATCH_CHARS: Final = 32 * 1024 * 1024


def write_content(conn: Conn, run_id: str, plan: InputPlan) -> None:
    """Insert the run's references to the plan's new pieces and nodes, then the pieces.

    References go first: a prune holds ``content_refs`` in SHARE mode while it sweeps, so
    a reference either commits before the sweep (which then keeps the piece) or waits for
    it, and the piece inserted after the wait is there even if the sweep removed it.
    """
    rows = plan.rows
    if not rows:
        return
    half = len(rows) // 2
    with conn.cursor() as cursor:
        cursor.executemany(_REFER, [(run_id, digest) for digest, _ in rows])
        cursor.executemany(_INSERT, rows[:half])
        crash_point("store.content_half_written")
        cursor.executemany(_INSERT, rows[half:])


def write_rows(conn: Conn, run_id: str, rows: Sequence[tuple[str, str]]) -> None:
    """Insert the run's references to content rows (digest, body) that may be stored
    already (an event's long strings), then the rows (references first: see
    :func:`write_content`)."""
    if rows:
        with conn.cursor() as cursor:
            cursor.executemany(_REFER, [(run_id, digest) for digest, _ in rows])
            cursor.executemany(_INSERT, rows)


def reader(conn: Conn) -> Callable[[Sequence[str]], Mapping[str, str]]:
    """Reads content rows by digest on ``conn``."""

    def read(digests: Sequence[str]) -> Mapping[str, str]:
        rows = conn.execute(
            "SELECT hash, body FROM content WHERE hash = ANY(%s)", (list(digests),)
        ).fetchall()
        return {str(digest): str(body) for digest, body in rows}

    return read


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
