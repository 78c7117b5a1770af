"""The SQLite statements of content stored once (the rules are in ``.._content``): writing an
input's new pieces, reading pieces back, and converting rows of the former format.

A body of :data:`PACK_MIN_CHARS` or more is stored zlib-compressed (a BLOB) when that saves
a tenth of it: SQLite keeps rows whole in 4 KiB pages, and a tool's 2 KiB result left one
such row a page. PostgreSQL compresses long values itself (TOAST)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

import apsw

from ..._crash import crash_point
from .._content import CONVERT_BATCH, SWEEP_RUN_CONTENT, InputPlan, convert_stored_row

__all__ = [
    "PACK_MIN_CHARS",
    "SWEEP",
    "convert_rows",
    "packed",
    "reader",
    "unpacked",
    "write_content",
    "write_rows",
]

SWEEP: Final = SWEEP_RUN_CONTENT.format(param="?")
_INSERT: Final = "INSERT INTO content (hash, body) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"
_REFER: Final = "INSERT INTO content_refs (run_id, hash) VALUES (?, ?) ON CONFLICT DO NOTHING"
_CONVERT: Final = {
    "select": "SELECT input_json, record FROM operations "
    "WHERE run_id = ? AND step_id = ? AND sequence = ?",
    "insert": _INSERT,
    "refer": _REFER,
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


def write_content(conn: apsw.Connection, run_id: str, plan: InputPlan) -> None:
    """Insert the plan's new pieces and nodes and the run's references to them."""
    if not plan.rows:
        return
    rows = packed(_missing(conn, plan.rows))
    half = len(rows) // 2
    conn.executemany(_INSERT, rows[:half])
    crash_point("store.content_half_written")
    conn.executemany(_INSERT, rows[half:])
    conn.executemany(_REFER, [(run_id, digest) for digest, _ in plan.rows])


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


def write_rows(conn: apsw.Connection, run_id: str, rows: Sequence[tuple[str, str]]) -> None:
    """Insert content rows (digest, body) that may be stored already, and the run's
    references to them (an event's long strings)."""
    if rows:
        conn.executemany(_INSERT, packed(rows))
        conn.executemany(_REFER, [(run_id, digest) for digest, _ in rows])


def reader(conn: apsw.Connection) -> Callable[[Sequence[str]], Mapping[str, str]]:
    """Reads content rows by digest on ``conn``."""

    def read(digests: Sequence[str]) -> Mapping[str, str]:
        if len(digests) == 1:
            row = conn.execute("SELECT body FROM content WHERE hash = ?", (digests[0],))
            found = row.fetchone()
            return {} if found is None else {digests[0]: unpacked(found[0])}
        out: dict[str, str] = {}
        for start in range(0, len(digests), _MAX_KEYS):
            chunk = digests[start : start + _MAX_KEYS]
            marks = ", ".join("?" * len(chunk))
            for digest, body in conn.execute(
                f"SELECT hash, body FROM content WHERE hash IN ({marks})", tuple(chunk)
            ):
                out[str(digest)] = unpacked(body)
        return out

    return read


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
        return conn.executemany(sql, packed(rows) if sql == _INSERT else rows)

    return convert_stored_row(conn.execute, execute_many, key, **_CONVERT)
