"""A read-only view of a zincir PostgreSQL schema (the inspector, ``zincir runs``).

It never creates, migrates or writes the schema: each :meth:`ReadOnlyPostgres.snapshot`
opens one short connection whose sessions default to read-only transactions
(``default_transaction_read_only``), runs one ``REPEATABLE READ READ ONLY`` transaction,
checks that the schema is a zincir schema this code can read, and closes. The named
queries are written once (``store/_readonly_queries.py``); this module connects and runs
their statements (:class:`_PostgresRead`: timestamps as the UTC text the SQLite view
returns). The LangGraph thread queries are written once too (``store/_thread_reads.py``).
Driver errors leave as zincir errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from ..._encryption import Encryption, Sealer, resolve_encryption
from ..._errors import ConnectionLost, NotAZincirDatabase, SchemaTooNew, StoreError
from .._readonly_queries import READ_COLUMNS
from .._readonly_rows import REQUIRED_TABLES, Row, UsageCache, sum_usage
from .._readonly_sealing import open_indexed, reader_sealer, still_sealed
from .._snapshot_reads import SnapshotReads
from .._sql import Params, Sql, opened_row, opened_rows
from ._base import Conn, migrations, split_schema
from ._errors import DRIVER_ERRORS, translate
from ._log import text_time

__all__ = ["PostgresSnapshot", "ReadOnlyPostgres"]

_INTEGER = r"^-?[0-9]+$"  # a JSON number SQLite's json_each calls an integer
_USAGE_SQL: Final = (
    "SELECT u.key, sum((u.value #>> '{}')::numeric), "
    f"bool_and((u.value #>> '{{}}') ~ '{_INTEGER}') "
    "FROM {source} AS e CROSS JOIN LATERAL (SELECT e.payload::json -> 'usage' AS usage) AS p "
    "CROSS JOIN LATERAL json_each(CASE WHEN json_typeof(p.usage) = 'object' THEN p.usage "
    "ELSE '{}'::json END) AS u WHERE e.run_id = %s AND e.seq > %s AND e.seq <= %s "
    "AND e.type = 'llm_call' AND json_typeof(u.value) = 'number' GROUP BY u.key"
)


@contextmanager
def reading(where: str) -> Iterator[None]:
    """The driver-error boundary of a read: a broken connection lost nothing (nothing is
    written here); every other driver error as the store's writes translate it."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        if isinstance(error, errors.QueryCanceled | errors.LockNotAvailable):
            raise translate(error, where) from None
        raise ConnectionLost(
            f"the connection to {where} broke ({str(error).strip() or type(error).__name__}); "
            "nothing was written (this view only reads): try again once the server is back"
        ) from None
    except errors.InsufficientPrivilege as error:
        raise StoreError(f"this role may not read {where} ({error})") from None
    except DRIVER_ERRORS as error:
        raise translate(error, where) from None


def _text_times(row: Row) -> Row:
    """A row with its timestamptz values as the UTC text the SQLite view returns."""
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = text_time(value)
    return row


def _number(total: Decimal, integral: bool) -> int | float:
    """A sum as SQLite's SUM returns it: an int for integers only, else a float."""
    return int(total) if integral else float(total)


class _PostgresRead:
    """A :class:`~zincir.store._readonly_queries.ReadTx` over a read-only psycopg
    connection in its snapshot transaction; ``sealer`` opens the statements' payload
    columns (``opens``) of an encrypted schema."""

    __slots__ = ("conn", "path", "sealer")

    def __init__(self, conn: Conn, path: str, sealer: Sealer | None = None) -> None:
        self.conn = conn
        self.path = path
        self.sealer = sealer

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        with reading(self.path):
            row = self.conn.execute(statement.postgres, params).fetchone()
        if row is not None and statement.opens and self.sealer is not None:
            return opened_row(self.sealer, statement, row, params)
        return row

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        return opened_rows(
            self.sealer, statement, self.text_all(statement.postgres, params), params
        )

    def text_all(self, text: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Every row of the psycopg statement ``text``."""
        with reading(self.path):
            return self.conn.execute(text, tuple(params)).fetchall()

    def rows(self, statement: Sql, params: Params = ()) -> list[Row]:
        """Every row as a dict, times as UTC text."""
        with reading(self.path), self.conn.cursor(row_factory=dict_row) as cursor:
            found = cursor.execute(statement.postgres, params).fetchall()
        if statement.opens and self.sealer is not None:
            open_indexed(self.sealer, statement, found, params)
        return [_text_times(row) for row in found]

    def stamp(self, moment: datetime | None) -> object:
        return moment

    def values(self, items: Sequence[str]) -> object:
        return list(items)

    def unpack_content(self, body: object) -> str:
        if self.sealer is not None and still_sealed(body):
            body = self.sealer.open(body)
        return body.decode("utf-8") if isinstance(body, bytes) else str(body)

    def usage_sums(self, source: str, run_id: str, upto: int, last_seq: int) -> list[Any] | None:
        """Summed in SQL; an event whose payload is not JSON is skipped, as SQLite's
        ``json_valid`` skips it (the sums are then taken in Python, after a savepoint)."""
        with reading(self.path):
            try:
                with self.conn.transaction():  # a savepoint: a cast error leaves it alone
                    found = self.conn.execute(
                        _USAGE_SQL.replace("{source}", source), (run_id, upto, last_seq)
                    ).fetchall()
                return [(str(name), _number(total, bool(whole))) for name, total, whole in found]
            except errors.InvalidTextRepresentation:
                pass
        found = self.text_all(
            f"SELECT payload FROM {source} AS e WHERE run_id = %s AND seq > %s "
            "AND seq <= %s AND type = 'llm_call'",
            (run_id, upto, last_seq),
        )
        return sum_usage(payload for (payload,) in found)


class ReadOnlyPostgres:
    """A zincir PostgreSQL schema opened read-only: one short connection per snapshot."""

    def __init__(
        self, url: str, *, connect_timeout: float = 10.0, encryption: Encryption | None = None
    ) -> None:
        self._conninfo, self.schema, self.path = split_schema(url)
        self.known_version = migrations()[-1][0]
        params = conninfo_to_dict(self._conninfo)  # the URL's own options are kept
        self._options = (
            f"{params.get('options') or ''} -c search_path={self.schema} -c TimeZone=UTC "
            "-c default_transaction_read_only=on"
        ).strip()
        self._application = str(params.get("application_name") or "zincir-readonly")
        self._timeout = max(1, int(connect_timeout))
        self.usage_cache = UsageCache()
        self.encryption = resolve_encryption(encryption)

    def _connect(self) -> Conn:
        try:
            conn: Conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                options=self._options,
                connect_timeout=self._timeout,
                application_name=self._application,
            )
        except psycopg.OperationalError as error:
            raise ConnectionLost(
                f"cannot connect to {self.path} ({str(error).strip()}); is the server up and "
                "the URL right? Nothing was read"
            ) from None
        except DRIVER_ERRORS as error:
            raise translate(error, self.path) from None
        return conn

    def _tables(self, conn: Conn) -> frozenset[str]:
        """The schema's tables (and which :data:`READ_COLUMNS` it has), after refusing a
        schema that is not a readable zincir one."""
        columns = [f"{table}.{column}" for table, column in READ_COLUMNS]
        tables = frozenset(
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "UNION ALL SELECT table_name || '.' || column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name || '.' || column_name = ANY(%s)",
                (self.schema, self.schema, columns),
            )
        )
        if not tables:
            raise NotAZincirDatabase(
                f"{self.path} holds no zincir tables (schema {self.schema!r} is empty or "
                "missing); run `zincir migrate --db URL` or your application first, or name "
                "the schema with ?schema=NAME (reading never creates a schema)"
            )
        if not REQUIRED_TABLES <= tables:
            raise NotAZincirDatabase(
                f"schema {self.schema!r} of {self.path} holds another application's tables "
                f"({', '.join(sorted(tables)[:5])}), not zincir's; name zincir's schema with "
                "?schema=NAME"
            )
        (newest,) = conn.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
        ).fetchone() or (0,)
        if int(newest) > self.known_version:
            raise SchemaTooNew(
                f"{self.path} has schema version {newest}, newer than this zincir's "
                f"{self.known_version}; upgrade zincir"
            )
        return tables

    def schema_version(self) -> int:
        """The newest migration applied to the schema (after the checks of a snapshot)."""
        with self.snapshot() as reader:
            (newest,) = reader._tuples("SELECT coalesce(max(version), 0) FROM schema_migrations")[0]
        return int(newest)

    def check(self) -> None:
        """Raise unless the schema is a zincir schema this code can read (NotAZincirDatabase,
        SchemaTooNew, ConnectionLost, ...)."""
        with self.snapshot():
            pass

    @contextmanager
    def snapshot(self) -> Iterator[PostgresSnapshot]:
        """A :class:`PostgresSnapshot` over one repeatable-read, read-only transaction,
        rolled back (by closing its connection) when the block ends."""
        conn = self._connect()
        try:
            with reading(self.path):
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                tables = self._tables(conn)
                sealer = reader_sealer(
                    _PostgresRead(conn, self.path),
                    tables,
                    self.encryption,
                    text=True,
                    where=f"schema {self.schema!r} of {self.path}",
                )
            yield PostgresSnapshot(conn, self, tables, sealer)
        finally:
            conn.close()


class PostgresSnapshot(SnapshotReads):
    """The named read queries, inside one read transaction of a :class:`ReadOnlyPostgres`."""

    def __init__(
        self,
        conn: Conn,
        database: ReadOnlyPostgres,
        tables: frozenset[str],
        sealer: Sealer | None = None,
    ) -> None:
        self._conn = conn
        self._database = database
        self._tables = tables
        self._tx = self._read = _PostgresRead(conn, database.path, sealer)
        self._usage_cache = database.usage_cache

    @property
    def path(self) -> str:
        """The schema being read, as a URL without its password."""
        return self._database.path

    def _tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of the psycopg statement ``sql`` (the schema's version)."""
        return self._read.text_all(sql, params)
