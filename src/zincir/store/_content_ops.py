"""Content by digest: put a run's content (its references first) and read it back, for a
side that sends references instead of the text (a TemporalRuntime and its workers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from ._content import ContentIndex, strict_reader
from ._content_rows import read_content, write_content
from ._sql import Rules

__all__ = ["ContentOps"]


class ContentOps(Rules):
    """``content`` rows written and read by their SHA-256 hex digest."""

    _content: ContentIndex  # the store's content cache

    async def put_content(self, run_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Store each (digest, text) once, referred to by ``run_id`` (a prune of the run
        removes what no other run refers to; on PostgreSQL references go first, so a
        concurrent prune keeps the rows); the caller computed each digest."""
        rows = list(items)
        if rows:
            await self._write_tx(lambda tx: write_content(tx, run_id, rows))

    async def read_content(self, digests: Sequence[str]) -> Mapping[str, str]:
        """The stored text of each digest found (a missing one is left out)."""
        wanted = list(digests)
        if not wanted:
            return {}
        return await self._read_tx(lambda tx: read_content(tx, wanted))

    async def compose_content(self, description: str, *, run_id: str | None = None) -> str:
        """The text a content description stands for (see ``zincir._pieces``), composed in
        one read through the store's content cache; ContentMissing names a missing piece."""
        return await self._read_tx(
            lambda tx: self._content.compose_input(
                "", description, strict_reader(partial(read_content, tx)), run_id
            ),
            offload=True,
        )
