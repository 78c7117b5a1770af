"""Content by digest on SQLite: put a run's content (its references first) and read it back,
for a side that sends references instead of the text (a TemporalRuntime and its workers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import apsw

from ..._errors import ContentMissing
from ._base import SQLiteBase
from ._content import packed, reader

__all__ = ["ContentOps"]

_INSERT: Final = "INSERT INTO content (hash, body) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"
_REFER: Final = "INSERT INTO content_refs (run_id, hash) VALUES (?, ?) ON CONFLICT DO NOTHING"


class ContentOps(SQLiteBase):
    """``content`` rows written and read by their SHA-256 hex digest."""

    async def put_content(self, run_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Store each (digest, text) once, referred to by ``run_id`` (a prune of the run
        removes what no other run refers to); the caller computed each digest."""
        rows = list(items)
        if not rows:
            return

        def write(conn: apsw.Connection) -> None:
            conn.executemany(_REFER, [(run_id, digest) for digest, _ in rows])
            conn.executemany(_INSERT, packed(rows))

        await self._write(write)

    async def read_content(self, digests: Sequence[str]) -> Mapping[str, str]:
        """The stored text of each digest found (a missing one is left out)."""
        wanted = list(digests)
        if not wanted:
            return {}
        return await self._read(lambda conn: dict(reader(conn)(wanted)))

    async def compose_content(self, description: str, *, run_id: str | None = None) -> str:
        """The text a content description stands for (see ``zincir._pieces``), composed in
        one read through the store's content cache; ContentMissing names a missing piece."""
        return await self._read(
            lambda conn: self._content.compose_input(
                "", description, _strict(reader(conn)), run_id
            ),
            offload=True,
        )


def _strict(
    read: Callable[[Sequence[str]], Mapping[str, str]],
) -> Callable[[Sequence[str]], Mapping[str, str]]:
    """``read`` that raises ContentMissing for a digest it does not find."""

    def strict(digests: Sequence[str]) -> Mapping[str, str]:
        found = read(digests)
        for digest in digests:
            if digest not in found:
                raise ContentMissing(f"the stored content {digest} is missing")
        return found

    return strict
