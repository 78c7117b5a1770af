"""Content by digest on PostgreSQL: put a run's content (its references first) and read it
back, for a side that sends references instead of the text (a TemporalRuntime and its
workers on several machines)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._content import strict_reader
from ._base import PostgresBase
from ._content import reader, write_rows

__all__ = ["ContentOps"]


class ContentOps(PostgresBase):
    """``content`` rows written and read by their SHA-256 hex digest."""

    async def put_content(self, run_id: str, items: Sequence[tuple[str, str]]) -> None:
        """Store each (digest, text) once, referred to by ``run_id``: references first, so
        a concurrent prune (which holds ``content_refs`` in SHARE mode) keeps the rows."""
        rows = list(items)
        if not rows:
            return
        await self._write(lambda conn: write_rows(conn, run_id, rows))

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
                "", description, strict_reader(reader(conn)), run_id
            ),
            offload=True,
        )
