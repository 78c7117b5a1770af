"""The SQLite side of the rule seam: a transaction as rule functions see it.

``zincir_now()`` in a statement is the ``now`` the transaction was given (the store's
clock, read once per run of a transaction function), registered on every connection by
``register_functions``; times are parameters and rows as sortable UTC text.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import apsw

from ..._json import encode_checked
from ..._time import from_db, system_clock, system_stamp, to_db
from .._records import Lease, NewEvent
from .._sql import Params, Rules, Sql, Tx, opened_row, opened_rows, sealed_params
from ._base import SQLiteBase
from ._content import pack_rows, unpacked
from ._log import NOW, append, insert_events

if TYPE_CHECKING:
    from ..._encryption import Sealer

__all__ = ["SqliteRules", "SqliteTx"]

T = TypeVar("T")


class SqliteTx:
    """A :class:`~zincir.store._sql.Tx` over an APSW connection, at time ``now``."""

    __slots__ = ("_later", "conn", "now", "sealer", "stamp_now")

    def __init__(self, conn: apsw.Connection, now: datetime, sealer: Sealer | None = None) -> None:
        self.conn = conn
        self.now = now
        self.sealer = sealer
        self._later: tuple[str, datetime] | None = None
        self.stamp_now = NOW.stamp = to_db(now)  # ``now`` as stored, and zincir_now()'s

    def execute(self, statement: Sql, params: Params = ()) -> None:
        if statement.seals and self.sealer is not None:
            params = sealed_params(self.sealer, statement, params)
        self.conn.execute(statement.sqlite, params)

    def executemany(self, statement: Sql, rows: Iterable[Params]) -> None:
        sealer = self.sealer
        if statement.seals and sealer is not None:
            rows = [sealed_params(sealer, statement, row) for row in rows]
        self.conn.executemany(statement.sqlite, rows)

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        if statement.seals and self.sealer is not None:
            params = sealed_params(self.sealer, statement, params)
        row: tuple[Any, ...] | None = self.conn.execute(statement.sqlite, params).fetchone()
        if row is not None and statement.opens and self.sealer is not None:
            return opened_row(self.sealer, statement, row, params)
        return row  # APSW's rows are tuples

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        found = [tuple(row) for row in self.conn.execute(statement.sqlite, params)]
        return opened_rows(self.sealer, statement, found, params)

    def stamp(self, moment: datetime | None) -> object:
        return None if moment is None else to_db(moment)

    def time(self, value: Any) -> datetime:
        later = self._later  # a time this transaction computed comes back as computed
        if later is not None and value == later[0]:
            return later[1]
        return from_db(value)

    def values(self, items: Sequence[str]) -> object:
        return encode_checked(list(items))

    def append(self, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
        return append(self, lease, events)

    def violates(self, error: Exception, index: str) -> bool:
        return isinstance(error, apsw.ConstraintError)

    def later(self, ttl: timedelta) -> object:
        moment = self.now + ttl
        self._later = (to_db(moment), moment)
        return self._later[0]

    def lock(self, space: int, keys: Iterable[str], *, exclusive: bool) -> None:
        pass  # one writer at a time

    def insert_events(self, rows: Sequence[Params]) -> None:
        insert_events(self, rows)

    def pack_content(
        self, rows: Sequence[tuple[str, str]], *, new: bool = False
    ) -> Sequence[tuple[str, object]]:
        return pack_rows(self.conn, rows, new=new)

    def unpack_content(self, body: object) -> str:
        return unpacked(body)


class SqliteRules(Rules, SQLiteBase):
    """Rule functions run in the writer's (group-committed) transactions and in reads, each
    given the store's clock."""

    def _write_tx(self, fn: Callable[[Tx], T], *, durable: bool = True) -> Coroutine[Any, Any, T]:
        sealer = self.sealer
        return self._write(lambda conn: fn(SqliteTx(conn, self.clock(), sealer)), durable=durable)

    async def _read_tx(self, fn: Callable[[Tx], T], *, offload: bool = False) -> T:
        sealer = self.sealer
        return await self._read(
            lambda conn: fn(SqliteTx(conn, self.clock(), sealer)), offload=offload
        )

    blocking_tx = True

    def _write_tx_here(self, fn: Callable[[Tx], T], *, durable: bool = True) -> T:
        sealer = self.sealer
        return self._writer.run_here(
            lambda conn: fn(SqliteTx(conn, self.clock(), sealer)), durable=durable
        )

    def _write_alone_here(
        self, statement: Sql, params: Params, *, durable: bool = True
    ) -> bool | None:
        sealer = self.sealer
        if statement.seals and sealer is not None:
            params = sealed_params(sealer, statement, params)
        return self._writer.run_alone(statement.sqlite, params, durable=durable)

    def _stamp_here(self) -> str:
        clock = self.clock
        return system_stamp() if clock is system_clock else to_db(clock())

    def _read_tx_here(self, fn: Callable[[Tx], T]) -> T:
        sealer = self.sealer
        return self._writer.read(lambda conn: fn(SqliteTx(conn, self.clock(), sealer)))
