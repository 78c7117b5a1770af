"""Content rows written and read once for every backend: the run's references go first,
then the pieces, and bodies are kept each backend's way (:meth:`Tx.pack_content`,
``unpack_content``: SQLite compresses long bodies, PostgreSQL leaves that to TOAST).

References first: a prune holds ``content_refs`` in SHARE mode while it sweeps
(PostgreSQL), so a reference either commits before the sweep (which then keeps the piece)
or waits for it, and the piece inserted after the wait is there even if the sweep removed
it. SQLite runs one writer at a time, and nothing refers from ``content_refs`` to
``content``, so the order there changes nothing but is the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, Literal, Protocol

from .._crash import crash_point
from ._content import CONVERT_BATCH, InputPlan, convert_stored_row
from ._sql import Params, Sql, Tx, sql

__all__ = [
    "INSERT",
    "REFER",
    "ContentReads",
    "convert_row",
    "convert_rows",
    "read_content",
    "write_content",
    "write_input",
]

INSERT: Final = sql(
    "INSERT INTO content (hash, body) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING", seals=(1,)
)
REFER: Final = sql("INSERT INTO content_refs (run_id, hash) VALUES (?, ?) ON CONFLICT DO NOTHING")
_BODY: Final = sql("SELECT body FROM content WHERE hash = ?", opens=(0,))
_BODIES: Final = sql("SELECT hash, body FROM content WHERE hash {in_list}", opens=(1,))
_UNCONVERTED: Final = sql(
    "SELECT run_id, step_id, sequence, length(input_json) + coalesce(length(record), 0) "
    "FROM operations WHERE input_parts IS NULL AND (run_id, step_id, sequence) > (?, ?, ?) "
    "ORDER BY run_id, step_id, sequence LIMIT ?"
)
_CONVERT: Final = {
    "select": sql(
        "SELECT input_json, record FROM operations "
        "WHERE run_id = ? AND step_id = ? AND sequence = ?{for_update}"
    ),
    "insert": INSERT,
    "refer": REFER,
    "update": sql(
        "UPDATE operations SET input_json = ?, input_parts = ?, record = ? "
        "WHERE run_id = ? AND step_id = ? AND sequence = ?"
    ),
}
"""The statements converting one row written whole (see .._content.convert_stored_row)."""
_BATCH_CHARS: Final = 32 * 1024 * 1024
Execute = Callable[[str, Sequence[Any]], Any]


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


def convert_rows(
    dialect: Literal["sqlite", "postgres"],
    execute: Execute,
    convert: Callable[[tuple[str, str, int]], int],
    transaction: Callable[[], AbstractContextManager[object]],
    batch: int = CONVERT_BATCH,
) -> int:
    """Convert every row written whole to content stored once, ``batch`` keys at most per
    ``transaction()`` (a row already converted is skipped, so a killed run resumes), each by
    ``convert(key)`` (see :func:`convert_row`); how many. ``execute`` runs the ``dialect``'s
    text of a statement on the migrating connection."""
    converted = 0
    after: tuple[str, str, int] = ("", "", -1)
    while True:
        with transaction():
            keys = execute(getattr(_UNCONVERTED, dialect), (*after, batch)).fetchall()
            total = 0
            for run_id, step_id, sequence, size in keys:
                after = (str(run_id), str(step_id), int(sequence))
                converted += convert(after)
                total += int(size or 0)
                if total > _BATCH_CHARS:
                    break
        if not keys:
            return converted


def convert_row(
    dialect: Literal["sqlite", "postgres"],
    execute: Execute,
    execute_many: Execute,
    key: tuple[str, str, int],
) -> int:
    """Convert operation ``key``'s row written whole (``.._content.convert_stored_row``) with
    the ``dialect``'s statements; 1 when the row changed."""
    texts = {name: getattr(statement, dialect) for name, statement in _CONVERT.items()}
    return convert_stored_row(execute, execute_many, key, **texts)
