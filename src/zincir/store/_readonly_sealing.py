"""How a read-only view reads an encrypted store: its sealer, and the opening of the
payload columns of the rows it reads.

A view never writes, so it cannot mark or check a store as the writer does at open
(``_sealing.settle_encryption``): it reads the ``store_encryption`` row (absent in a file
older than encryption: a plain store) and checks the keys it was given against the stored
check values. Opened without keys, an encrypted store is read by a *blind* sealer: the
structure shows (runs, statuses, seqs, times, digests) and every payload reads as
:data:`~zincir._encryption.SEALED`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Final, Protocol

from .._encryption import SEALED, Encryption, Sealer, key_id_of
from ._readonly_rows import Row
from ._sealing import KEY_CHECKS, verify_keys
from ._sql import Params, Sql, sql

__all__ = [
    "SEALED",
    "open_columns",
    "open_indexed",
    "opened_value",
    "reader_sealer",
    "still_sealed",
]

_STATE: Final = sql("SELECT state FROM store_encryption WHERE id = 1")


class _Reads(Protocol):
    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None: ...
    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]: ...


def reader_sealer(
    tx: _Reads, tables: frozenset[str], encryption: Encryption | None, *, text: bool, where: str
) -> Sealer | None:
    """The sealer a view reads with: None for a plain store, a blind one for an encrypted
    store read without keys; PayloadTampered when a key given under a known id is not the
    one that sealed the store (``tx`` reads before any sealer applies)."""
    if "store_encryption" not in tables:
        return None
    found = tx.one(_STATE)
    if found is None:
        return None
    if encryption is None:
        return Sealer(None, text=text)
    sealer = Sealer(encryption, text=text, plain_ok=str(found[0]) == "sealing")
    if "sealing_keys" in tables:
        verify_keys(tx.all(KEY_CHECKS), sealer, where)
    return sealer


def opened_value(sealer: Sealer, value: Any, run_id: Any = None) -> Any:
    """``value`` opened (text as text, bytes as bytes); a plain value as itself when it is
    not in a sealed form and the sealer allows it."""
    return sealer.open(value, run_id if isinstance(run_id, str) else None)


def open_columns(
    sealer: Sealer, rows: Iterable[Row], names: Collection[str], run_id: str | None = None
) -> None:
    """Open the columns ``names`` of dict ``rows`` (in place); errors name ``run_id``, else
    the row's own ``run_id`` or ``id``."""
    for row in rows:
        owner = run_id or row.get("run_id") or row.get("id")
        for name in names:
            if name in row:
                row[name] = opened_value(sealer, row[name], owner)


def open_indexed(sealer: Sealer, statement: Sql, rows: list[Row], params: Params) -> list[Row]:
    """Open the columns ``statement.opens`` names by position in dict ``rows`` (in place)."""
    if not statement.opens or not rows:
        return rows
    run_id = None if statement.run_param is None else params[statement.run_param]
    names = list(rows[0])
    wanted = [names[index] for index in statement.opens if index < len(names)]
    open_columns(sealer, rows, wanted, run_id if isinstance(run_id, str) else None)
    return rows


def still_sealed(value: Any) -> bool:
    """Whether ``value`` is in a sealed form (not opened by the statement that read it)."""
    return key_id_of(value) is not None
