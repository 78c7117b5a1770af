"""Resealing every stored payload with one key (``zincir reencrypt``), and sealing a database
that was plain, in bounded transactions while runs go on.

The walk reads each table of :data:`~._sealing.SEALED_COLUMNS` in its key's order, a batch
at a time in a read snapshot, where it opens every value not already under the target key
(known by its header, without decrypting) and seals it again; a write transaction then swaps
each row's values only where they are still those it read (a row a live run rewrote
meanwhile is read again, never overwritten). Each batch commits on its own: a run killed at
any point and started again walks once more, passing over what is done by its headers.

A plain database is first marked ``sealing`` (the guards refuse new plain values, a plain
value still opens as itself), then sealed row by row, then marked ``sealed``. Written once
over the :class:`~._sql.Tx` seam, for both backends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from .._encryption import Encryption, Sealer, key_id_of
from .._errors import EncryptionKeyMissing, InvalidInput, PayloadTampered
from ._sealing import (
    SEALED_COLUMNS,
    SEALED_ROWS,
    check_keys,
    encryption_state,
    mark_encrypted,
    sealing_plain,
)
from ._sql import Rules, Sql, Tx, sql

if TYPE_CHECKING:
    from ._protocol import Store

__all__ = ["DEFAULT_BATCH", "ReencryptReport", "ReencryptedTable", "reencrypt", "vacuum_sealed"]

DEFAULT_BATCH: Final = 500
"""Rows a batch reads and reseals in one transaction, by default."""
MAX_BATCH: Final = 100_000
_SWAP_ROWS: Final = 250
"""Rows one swap statement sets at most (its parameters stay within both backends' limits)."""
_ATTEMPTS: Final = 5
"""How often a row a live run keeps rewriting is read again before it is left as it is."""


@dataclass(frozen=True, slots=True)
class ReencryptedTable:
    """One table's walk: rows read, rows resealed, and rows ``left`` because live runs
    rewrote them meanwhile under another key (make every process seal with the target key,
    then run again)."""

    table: str
    scanned: int = 0
    resealed: int = 0
    left: int = 0


@dataclass(frozen=True, slots=True)
class ReencryptReport:
    """What :func:`reencrypt` did: every table's walk, and whether it sealed a database that
    was plain (``sealed``: it is marked sealed now)."""

    to: str
    tables: tuple[ReencryptedTable, ...]
    sealed: bool = False

    @property
    def resealed(self) -> int:
        """Rows resealed in every table."""
        return sum(table.resealed for table in self.tables)

    @property
    def left(self) -> int:
        """Rows not resealed because live runs kept rewriting them under another key."""
        return sum(table.left for table in self.tables)


@dataclass(frozen=True, slots=True)
class _Table:
    """A sealed table's statements: a page in key order, a row by its key, a row's swap."""

    name: str
    keys: tuple[str, ...]
    run: str | None
    columns: tuple[str, ...]
    first: Sql
    after: Sql
    row: Sql

    @classmethod
    def of(cls, name: str) -> _Table:
        keys, run = SEALED_ROWS[name]
        columns = SEALED_COLUMNS[name]
        read = ", ".join((*keys, run or "NULL", *columns))
        order = ", ".join(keys)
        past = f"({order}) > ({', '.join('?' * len(keys))})" if len(keys) > 1 else f"{keys[0]} > ?"
        match = " AND ".join(f"{key} = ?" for key in keys)
        return cls(
            name,
            keys,
            run,
            columns,
            sql(f"SELECT {read} FROM {name} ORDER BY {order} LIMIT ?"),
            sql(f"SELECT {read} FROM {name} WHERE {past} ORDER BY {order} LIMIT ?"),
            sql(f"SELECT {read} FROM {name} WHERE {match}"),
        )

    def swap(self, columns: tuple[str, ...], rows: int) -> Sql:
        """Set ``columns`` of ``rows`` rows, each where they still hold the values read; the
        keys of the rows set. Parameters, a row after another: its key, the new values, the
        old values."""
        width = len(self.keys) + 2 * len(columns)
        values = ", ".join(["(" + ", ".join("?" * width) + ")"] * rows)
        new = len(self.keys) + 1
        old = new + len(columns)
        sets = ", ".join(f"{c} = v.column{new + i}" for i, c in enumerate(columns))
        where = " AND ".join(
            [
                *(f"{self.name}.{k} = v.column{i + 1}" for i, k in enumerate(self.keys)),
                *(f"{self.name}.{c} = v.column{old + i}" for i, c in enumerate(columns)),
            ]
        )
        returned = ", ".join(f"{self.name}.{k}" for k in self.keys)
        return sql(
            f"UPDATE {self.name} SET {sets} FROM (VALUES {values}) AS v "
            f"WHERE {where} RETURNING {returned}"
        )


@dataclass(frozen=True, slots=True)
class _Change:
    """One row's values to swap: the new sealed values, in place of the old ones read."""

    key: tuple[Any, ...]
    columns: tuple[str, ...]
    new: tuple[object, ...]
    old: tuple[object, ...]


class _Resealer:
    """Opens a stored value with any key given and seals it again with the target key."""

    def __init__(self, encryption: Encryption, to: str, *, text: bool, plain_ok: bool) -> None:
        self.to = to
        self.sealer = Sealer(Encryption(_keys(encryption), to), text=text, plain_ok=plain_ok)

    def changes(self, table: _Table, rows: Sequence[tuple[Any, ...]]) -> list[_Change]:
        """The rows of ``rows`` (key, run, columns) holding a value not under the target key,
        each with its values resealed."""
        width = len(table.keys)
        found: list[_Change] = []
        for row in rows:
            columns: list[str] = []
            new: list[object] = []
            old: list[object] = []
            for column, value in zip(table.columns, row[width + 1 :], strict=True):
                if isinstance(value, memoryview):
                    value = value.tobytes()
                if value is None or key_id_of(value) == self.to:
                    continue
                columns.append(column)
                new.append(self._reseal(table, row, column, value))
                old.append(value)
            if columns:
                found.append(_Change(tuple(row[:width]), tuple(columns), tuple(new), tuple(old)))
        return found

    def _reseal(self, table: _Table, row: tuple[Any, ...], column: str, value: object) -> object:
        run_id = row[len(table.keys)]
        try:
            opened = self.sealer.open(value, None if run_id is None else str(run_id))
        except EncryptionKeyMissing as error:
            raise EncryptionKeyMissing(
                f"{error.detail} (in {table.name}.{column}{_where(table, row)})",
                key_id=error.key_id,
                run_id=error.run_id,
            ) from None
        except PayloadTampered as error:
            raise PayloadTampered(
                f"{error.detail} (in {table.name}.{column}{_where(table, row)}); restore the "
                "database from a backup",
                run_id=error.run_id,
            ) from None
        assert isinstance(opened, str | bytes), "a sealer with keys opens to text or bytes"
        return self.sealer.seal(opened)


def _keys(encryption: Encryption) -> dict[str, bytes]:
    """Every key of ``encryption`` by its id (to give them another active key)."""
    keys = {key_id: encryption.key(key_id) for key_id in encryption.key_ids}
    return {key_id: key for key_id, key in keys.items() if key is not None}


def _where(table: _Table, row: tuple[Any, ...]) -> str:
    """The row named by its key, for an error (identifiers are never sealed)."""
    if table.run is not None and row[len(table.keys)] is not None:
        return ""  # the error names the run
    pairs = ", ".join(f"{k}={v!r}" for k, v in zip(table.keys, row, strict=False))
    return f" at {pairs}"


def _page(
    table: _Table, resealer: _Resealer, after: tuple[Any, ...] | None, limit: int, tx: Tx
) -> tuple[int, tuple[Any, ...] | None, list[_Change]]:
    """A batch in key order past ``after``: rows read, the last key, the changes."""
    if after is None:
        rows = tx.all(table.first, (limit,))
    else:
        rows = tx.all(table.after, (*after, limit))
    if not rows:
        return 0, after, []
    last = tuple(rows[-1][: len(table.keys)])
    return len(rows), last, resealer.changes(table, rows)


def _reread(
    table: _Table, resealer: _Resealer, keys: Sequence[tuple[Any, ...]], tx: Tx
) -> list[_Change]:
    """The changes of the rows with ``keys`` as they are now (a row gone: none)."""
    rows = [row for key in keys if (row := tx.one(table.row, key)) is not None]
    return resealer.changes(table, rows)


def _swap(table: _Table, changes: Sequence[_Change], tx: Tx) -> list[tuple[Any, ...]]:
    """Swap each change's values where the row still holds those read, one statement for
    the rows setting the same columns; the keys missed."""
    groups: dict[tuple[str, ...], list[_Change]] = {}
    for change in changes:
        groups.setdefault(change.columns, []).append(change)
    done: set[tuple[Any, ...]] = set()
    for columns, group in groups.items():
        for start in range(0, len(group), _SWAP_ROWS):
            chunk = group[start : start + _SWAP_ROWS]
            params = [value for c in chunk for value in (*c.key, *c.new, *c.old)]
            done.update(tuple(row) for row in tx.all(table.swap(columns, len(chunk)), params))
    return [change.key for change in changes if change.key not in done]


Progress = Callable[[ReencryptedTable], None]


async def _walk(
    store: Rules, table: _Table, resealer: _Resealer, batch: int, progress: Progress | None
) -> ReencryptedTable:
    scanned = resealed = left = 0
    after: tuple[Any, ...] | None = None
    while True:
        count, after, changes = await store._read_tx(
            partial(_page, table, resealer, after, batch), offload=True
        )
        if count == 0:
            break
        scanned += count
        for _ in range(_ATTEMPTS):
            if not changes:
                break
            missed = await store._write_tx(partial(_swap, table, changes))
            resealed += len(changes) - len(missed)
            changes = (
                await store._read_tx(partial(_reread, table, resealer, missed)) if missed else []
            )
        left += len(changes)
        if progress is not None:
            progress(ReencryptedTable(table.name, scanned, resealed, left))
    return ReencryptedTable(table.name, scanned, resealed, left)


async def reencrypt(
    store_or_target: Store | str | os.PathLike[str],
    encryption: Encryption,
    *,
    to: str | None = None,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    vacuum: bool = False,
) -> ReencryptReport:
    """Seal every stored payload with key ``to`` (default ``encryption.active``), opening
    each with any key of ``encryption``; values already under ``to`` are passed over.

    ``store_or_target`` is an open store (with keys), or an existing database's SQLite path
    or PostgreSQL URL, then opened and closed here: a plain database given so is sealed
    (stop every process writing to it without the keys first). Runs may go on meanwhile: a
    row they rewrite is never overwritten. Killed, it can be run again. ``progress`` is
    called after each batch with the table's counts so far. ``vacuum`` then rewrites the
    database's files, so that no free page keeps a value as it was (:func:`vacuum_sealed`).
    """
    if not isinstance(encryption, Encryption):
        raise InvalidInput(
            f"reencrypt takes encryption=zincir.Encryption(...), not {type(encryption).__name__}"
        )
    target = encryption.active if to is None else to
    if encryption.key(target) is None:
        raise InvalidInput(
            f"the key {target!r} to seal with is not among the keys given "
            f"({', '.join(encryption.key_ids)})"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InvalidInput(f"batch must be a number of rows from 1 to {MAX_BATCH}, not {batch!r}")
    if isinstance(store_or_target, str | os.PathLike):
        from . import open_store
        from ._readonly import open_read_only

        open_read_only(store_or_target, encryption=encryption).check()  # never creates one
        with sealing_plain():
            opened = open_store(store_or_target, encryption=Encryption(_keys(encryption), target))
        try:
            report = await _reencrypt(opened, encryption, target, batch, progress)
            if vacuum:
                await asyncio.to_thread(vacuum_sealed, opened)
            return report
        finally:
            await opened.close()
    report = await _reencrypt(store_or_target, encryption, target, batch, progress)
    if vacuum:
        await asyncio.to_thread(vacuum_sealed, store_or_target)
    return report


def vacuum_sealed(store: object) -> None:
    """Rewrite the files holding the sealed tables, leaving no page with a value as it was
    before it was (re)sealed: SQLite's ``VACUUM`` and a WAL checkpoint that truncates it
    (writers wait meanwhile), PostgreSQL's ``VACUUM FULL`` of each sealed table (each locked
    meanwhile; the server's WAL archive and backups are not touched)."""
    vacuum = getattr(store, "_vacuum", None)
    if vacuum is None:
        raise InvalidInput(f"vacuum takes a zincir store, not {type(store).__name__}")
    vacuum(tuple(SEALED_COLUMNS))


async def _reencrypt(
    store: object, encryption: Encryption, to: str, batch: int, progress: Progress | None
) -> ReencryptReport:
    sealer: Sealer | None = getattr(store, "sealer", None)
    if not isinstance(store, Rules) or sealer is None:
        raise InvalidInput(
            "reencrypt takes a store opened with encryption=, or the database's path or URL "
            "(a plain database is sealed when given by its path or URL)"
        )
    where = str(getattr(store, "path", "the store"))
    state = await store._read_tx(encryption_state)
    resealer = _Resealer(encryption, to, text=sealer.text, plain_ok=state == "sealing")
    await store._write_tx(partial(check_keys, sealer=resealer.sealer, where=where))
    reports = []
    for name in SEALED_COLUMNS:
        reports.append(await _walk(store, _Table.of(name), resealer, batch, progress))
    report = ReencryptReport(to, tuple(reports))
    if state == "sealing" and report.left == 0:
        await store._write_tx(partial(mark_encrypted, state="sealed"))
        return ReencryptReport(to, report.tables, sealed=True)
    return report
