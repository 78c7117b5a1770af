"""How SQLite keeps content bodies (the rules are in ``.._content``, the writes and reads in
``.._content_rows``), and the conversion of rows of the former format.

A body of :data:`PACK_MIN_CHARS` or more is stored zlib-compressed (a BLOB) when that saves
a tenth of it: SQLite keeps rows whole in 4 KiB pages, and a tool's 2 KiB result left one
such row a page. PostgreSQL compresses long values itself (TOAST)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Final, cast

import apsw

from .._content import CONVERT_BATCH, convert_stored_row
from .._content_rows import INSERT, REFER

__all__ = ["PACK_MIN_CHARS", "convert_rows", "pack_rows", "packed", "unpacked"]

_CONVERT: Final = {
    "select": "SELECT input_json, record FROM operations "
    "WHERE run_id = ? AND step_id = ? AND sequence = ?",
    "insert": INSERT.sqlite,
    "refer": REFER.sqlite,
    "update": "UPDATE operations SET input_json = ?, input_parts = ?, record = ? "
    "WHERE run_id = ? AND step_id = ? AND sequence = ?",
}
"""The statements converting one row written whole (see .._content.convert_stored_row)."""
_MAX_KEYS: Final = 500
_LOOKUP_ABOVE: Final = 16
PACK_MIN_CHARS: Final = 512
"""A content body shorter than this is stored as text."""
_BATCH_CHARS: Final = 32 * 1024 * 1024


def packed(rows: Sequence[tuple[str, str]]) -> list[tuple[str, str | bytes]]:
    """Content rows (digest, body) as stored: long bodies compressed where that pays."""
    return [(digest, _pack(body)) for digest, body in rows]


def _pack(body: str) -> str | bytes:
    if len(body) < PACK_MIN_CHARS:
        return body
    data = body.encode("utf-8")
    small = zlib.compress(data, 6)
    return small if len(small) * 10 <= len(data) * 9 else body


def unpacked(body: object) -> str:
    """A stored content body as its text."""
    if isinstance(body, bytes):
        return zlib.decompress(body).decode("utf-8")
    return str(body)


def pack_rows(
    conn: apsw.Connection, rows: Sequence[tuple[str, str]], *, new: bool = False
) -> list[tuple[str, str | bytes]]:
    """Content rows as inserted (see ``Tx.pack_content``): ``new`` ones without those
    stored already, long bodies compressed where that pays."""
    return packed(_missing(conn, rows) if new else rows)


def _missing(conn: apsw.Connection, rows: Sequence[tuple[str, str]]) -> Sequence[tuple[str, str]]:
    """``rows`` without those stored already, looked up when there are many (a process's
    first write of a long run's input, whose pieces it does not know): cheaper than
    compressing each body for an insert that would be ignored."""
    if len(rows) <= _LOOKUP_ABOVE:
        return rows
    stored: set[str] = set()
    for start in range(0, len(rows), _MAX_KEYS):
        chunk = [digest for digest, _ in rows[start : start + _MAX_KEYS]]
        marks = ", ".join("?" * len(chunk))
        stored.update(
            str(digest)
            for (digest,) in conn.execute(
                f"SELECT hash FROM content WHERE hash IN ({marks})", tuple(chunk)
            )
        )
    return [row for row in rows if row[0] not in stored]


def convert_rows(conn: apsw.Connection) -> int:
    """Convert every row written whole to content stored once, a bounded batch per
    transaction (a row already converted is skipped, so a killed run resumes); how many."""
    converted = 0
    after: tuple[str, str, int] = ("", "", -1)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            keys = conn.execute(
                "SELECT run_id, step_id, sequence, length(input_json) + "
                "coalesce(length(record), 0) FROM operations WHERE input_parts IS NULL "
                "AND (run_id, step_id, sequence) > (?, ?, ?) "
                "ORDER BY run_id, step_id, sequence LIMIT ?",
                (*after, CONVERT_BATCH),
            ).fetchall()
            total = 0
            for run_id, step_id, sequence, size in keys:
                after = (str(run_id), str(step_id), int(cast(int, sequence)))
                converted += _convert(conn, after)
                total += int(size or 0)
                if total > _BATCH_CHARS:
                    break
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not keys:
            return converted


def _convert(conn: apsw.Connection, key: tuple[str, str, int]) -> int:
    def execute_many(sql: str, rows: Sequence[tuple[Any, ...]]) -> Any:
        return conn.executemany(sql, packed(rows) if sql == INSERT.sqlite else rows)

    return convert_stored_row(conn.execute, execute_many, key, **_CONVERT)
