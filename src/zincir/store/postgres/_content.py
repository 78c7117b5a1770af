"""The conversion of PostgreSQL's rows of the former format to content stored once (the
rules are in ``.._content``, the writes, reads and conversion in ``.._content_rows``)."""

from __future__ import annotations

from .._content_rows import convert_row
from .._content_rows import convert_rows as convert_all
from ._base import Conn

__all__ = ["convert_rows"]


def convert_rows(conn: Conn) -> int:
    """Convert every row written whole to content stored once (see
    ``.._content_rows.convert_rows``); how many. ``conn`` is in autocommit mode."""

    def convert(key: tuple[str, str, int]) -> int:
        return convert_row("postgres", conn.execute, conn.cursor().executemany, key)

    return convert_all("postgres", conn.execute, convert, conn.transaction)
