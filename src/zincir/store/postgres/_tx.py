"""The PostgreSQL side of the rule seam: a transaction as rule functions see it.

``zincir_now()`` is the schema's own function (the server's clock, or the store's pinned
one); times are parameters and rows as ``timestamptz``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import errors

from .._records import Lease, NewEvent
from .._sql import Params, Rules, Sql, Tx, micros, opened_row, opened_rows, sealed_params
from ._base import Conn, PostgresBase
from ._log import append, insert_events

if TYPE_CHECKING:
    from ..._encryption import Sealer

__all__ = ["PostgresRules", "PostgresTx"]

T = TypeVar("T")


class PostgresTx:
    """A :class:`~zincir.store._sql.Tx` over a psycopg connection in a transaction."""

    __slots__ = ("conn", "sealer")

    def __init__(self, conn: Conn, sealer: Sealer | None = None) -> None:
        self.conn = conn
        self.sealer = sealer

    def execute(self, statement: Sql, params: Params = ()) -> None:
        if statement.seals and self.sealer is not None:
            params = sealed_params(self.sealer, statement, params)
        self.conn.execute(statement.postgres, params)

    def executemany(self, statement: Sql, rows: Iterable[Params]) -> None:
        sealer = self.sealer
        if statement.seals and sealer is not None:
            batch = [sealed_params(sealer, statement, row) for row in rows]
        else:
            batch = list(rows)
        if batch:
            with self.conn.cursor() as cursor:
                cursor.executemany(statement.postgres, batch)

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        if statement.seals and self.sealer is not None:
            params = sealed_params(self.sealer, statement, params)
        row = self.conn.execute(statement.postgres, params).fetchone()
        if row is not None and statement.opens and self.sealer is not None:
            return opened_row(self.sealer, statement, row, params)
        return row

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(statement.postgres, params).fetchall()
        return opened_rows(self.sealer, statement, rows, params)

    def stamp(self, moment: datetime | None) -> object:
        return moment

    def time(self, value: Any) -> datetime:
        assert isinstance(value, datetime), "timestamptz columns read as datetimes"
        return value

    def values(self, items: Sequence[str]) -> object:
        return list(items)

    def append(self, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
        return append(self, lease, events)

    def violates(self, error: Exception, index: str) -> bool:
        return isinstance(error, errors.UniqueViolation) and error.diag.constraint_name == index

    def later(self, ttl: timedelta) -> object:
        return micros(ttl)

    def lock(self, space: int, keys: Iterable[str], *, exclusive: bool) -> None:
        take = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        for key in sorted(set(keys)):
            self.conn.execute(
                f"SELECT {take}(CAST(%s AS integer), hashtext(current_schema() || '.' || %s))",
                (space, key),
            )

    def insert_events(self, rows: Sequence[Params]) -> None:
        insert_events(self, rows)

    def pack_content(
        self, rows: Sequence[tuple[str, str]], *, new: bool = False
    ) -> Sequence[tuple[str, object]]:
        return rows  # TOAST compresses long values

    def unpack_content(self, body: object) -> str:
        return str(body)


class PostgresRules(Rules, PostgresBase):
    """Rule functions run in pooled write transactions and repeatable-read snapshots."""

    async def _write_tx(self, fn: Callable[[Tx], T], *, durable: bool = True) -> T:
        sealer = self.sealer
        return await self._write(lambda conn: fn(PostgresTx(conn, sealer)), durable=durable)

    async def _read_tx(self, fn: Callable[[Tx], T], *, offload: bool = False) -> T:
        sealer = self.sealer
        return await self._read(lambda conn: fn(PostgresTx(conn, sealer)), offload=offload)

    async def _write_first(
        self,
        statement: Sql,
        params: Params,
        found: T,
        rest: Callable[[Tx], T],
        *,
        durable: bool = True,
    ) -> T:
        if self.sealer is not None and statement.seals:
            params = sealed_params(self.sealer, statement, params)
        if await self._write_one(statement.postgres, tuple(params), durable=durable) is not None:
            return found
        return await self._write_tx(rest, durable=durable)
