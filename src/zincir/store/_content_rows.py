"""Content rows written and read once for every backend: the run's references go first,
then the pieces, and bodies are kept each backend's way (:meth:`Tx.pack_content`,
``unpack_content``: SQLite compresses long bodies, PostgreSQL leaves that to TOAST).

References first: a prune holds ``content_refs`` in SHARE mode while it sweeps
(PostgreSQL), so a reference either commits before the sweep (which then keeps the piece)
or waits for it, and the piece inserted after the wait is there even if the sweep removed
it. SQLite runs one writer at a time, and nothing refers from ``content_refs`` to
``content``, so the order there changes nothing but is the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

from .._crash import crash_point
from ._content import InputPlan
from ._sql import Params, Sql, Tx, sql

__all__ = ["INSERT", "REFER", "ContentReads", "read_content", "write_content", "write_input"]

INSERT: Final = sql("INSERT INTO content (hash, body) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING")
REFER: Final = sql("INSERT INTO content_refs (run_id, hash) VALUES (?, ?) ON CONFLICT DO NOTHING")
_BODY: Final = sql("SELECT body FROM content WHERE hash = ?")
_BODIES: Final = sql("SELECT hash, body FROM content WHERE hash {in_list}")


class ContentReads(Protocol):
    """What reading content needs of a transaction or a read-only snapshot."""

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None: ...
    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]: ...
    def values(self, items: Sequence[str]) -> object: ...
    def unpack_content(self, body: object) -> str: ...


def read_content(tx: ContentReads, digests: Sequence[str]) -> dict[str, str]:
    """The stored text of each digest found (a missing one is left out)."""
    if len(digests) == 1:
        found = tx.one(_BODY, (digests[0],))
        return {} if found is None else {digests[0]: tx.unpack_content(found[0])}
    if not digests:
        return {}
    rows = tx.all(_BODIES, (tx.values(digests),))
    return {str(digest): tx.unpack_content(body) for digest, body in rows}


def write_content(tx: Tx, run_id: str, rows: Sequence[tuple[str, str]]) -> None:
    """Store content rows (digest, text) that may be stored already (an event's long
    strings, a caller's pieces) and the run's references to them."""
    if rows:
        tx.executemany(REFER, [(run_id, digest) for digest, _ in rows])
        tx.executemany(INSERT, tx.pack_content(rows))


def write_input(tx: Tx, run_id: str, plan: InputPlan) -> None:
    """Store an operation input's new pieces and nodes (``plan.rows``) and the run's
    references to them."""
    rows = plan.rows
    if not rows:
        return
    tx.executemany(REFER, [(run_id, digest) for digest, _ in rows])
    stored = tx.pack_content(rows, new=True)
    half = len(stored) // 2
    tx.executemany(INSERT, stored[:half])
    crash_point("store.content_half_written")
    tx.executemany(INSERT, stored[half:])
