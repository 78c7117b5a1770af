"""How SQLite keeps content bodies (the rules are in ``.._content``, the writes and reads in
``.._content_rows``), and the conversion of rows of the former format.

A body of :data:`PACK_MIN_CHARS` or more is stored zlib-compressed (a BLOB) when that saves
a tenth of it: SQLite keeps rows whole in 4 KiB pages, and a tool's 2 KiB result left one
such row a page. PostgreSQL compresses long values itself (TOAST)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import apsw

from .._content import CONVERT_BATCH
from .._content_rows import INSERT, convert_row
from .._content_rows import convert_rows as convert_all

__all__ = ["PACK_MIN_CHARS", "convert_rows", "pack_rows", "packed", "unpacked"]

_MAX_KEYS: Final = 500
_LOOKUP_ABOVE: Final = 16
PACK_MIN_CHARS: Final = 512
"""A content body shorter than this is stored as text."""


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
    """Convert every row written whole to content stored once (see
    ``.._content_rows.convert_rows``), long bodies compressed; how many."""
    return convert_all(
        "sqlite",
        conn.execute,
        lambda key: _convert(conn, key),
        lambda: _immediate(conn),
        CONVERT_BATCH,
    )


def _convert(conn: apsw.Connection, key: tuple[str, str, int]) -> int:
    def execute_many(text: str, rows: Sequence[Any]) -> Any:
        return conn.executemany(text, packed(rows) if text == INSERT.sqlite else rows)

    return convert_row("sqlite", conn.execute, execute_many, key)


@contextmanager
def _immediate(conn: apsw.Connection) -> Iterator[None]:
    """One write transaction on ``conn``: committed, or rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
