"""A read-only view of a zincir SQLite file (the inspector, ``zincir runs``).

It never creates, migrates or writes the file: each :meth:`ReadOnlyDatabase.snapshot`
opens ``file:PATH?mode=ro`` (``SQLITE_OPEN_READONLY``, ``query_only``), checks that the
file is a zincir database this code can read, reads in one transaction and closes. The
named queries are written once (``store/_readonly_queries.py``); this module opens the
file and runs their statements (:class:`_SqliteRead`). The LangGraph thread queries are
written once too (``store/_thread_reads.py``). Driver errors leave as zincir errors,
damaged pages as :class:`~zincir.DatabaseCorrupt`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote

import apsw

from ..._encryption import Encryption, Sealer, resolve_encryption
from ..._errors import DatabaseCorrupt, InvalidInput, NotAZincirDatabase
from ..._json import encode_checked
from ..._time import to_db
from ..._validate import utf8
from .._readonly_queries import READ_COLUMNS
from .._readonly_rows import REQUIRED_TABLES, Row, UsageCache
from .._readonly_sealing import open_indexed, reader_sealer, still_sealed
from .._snapshot_reads import SnapshotReads
from .._sql import Params, Sql, opened_row, opened_rows
from .._thread_rows import PREVIEW_BYTES
from ._base import check_zincir_file, migrations, refuse_directory
from ._content import unpacked
from ._errors import DRIVER_ERRORS, close_quietly, translate
from ._log import register_functions

__all__ = ["PREVIEW_BYTES", "ReadOnlyDatabase", "SnapshotReader"]


_USAGE_SUMS: Final = (
    "SELECT usage.key, SUM(usage.value) FROM {source} AS e, "
    "json_each(e.payload, '$.usage') AS usage WHERE e.run_id = ? AND e.seq > ? "
    "AND e.seq <= ? AND e.type = 'llm_call' AND json_valid(e.payload) "
    "AND json_type(e.payload, '$.usage') = 'object' "
    "AND usage.type IN ('integer', 'real') GROUP BY usage.key"
)
_COLUMNS: Final = (
    "SELECT t.name || '.' || c.name FROM sqlite_schema AS t, pragma_table_info(t.name) AS c "
    "WHERE t.type = 'table' AND (t.name || '.' || c.name) IN (SELECT value FROM json_each(?))"
)


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """The driver-error boundary of a read: text that is not UTF-8 means damaged pages."""
    try:
        yield
    except UnicodeDecodeError:
        raise DatabaseCorrupt(
            f"{path} holds text that is not valid UTF-8, so it is damaged (or was written by "
            "another program); check it with `sqlite3 FILE 'PRAGMA integrity_check'` and "
            "restore it from a backup"
        ) from None
    except DRIVER_ERRORS as error:
        raise translate(error, path) from None


def _as_dict(cursor: apsw.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.getdescription(), row, strict=True)}


class _SqliteRead:
    """A :class:`~zincir.store._readonly_queries.ReadTx` over a read-only APSW connection
    (times are stored as the UTC text the rows carry); ``sealer`` opens the statements'
    payload columns (``opens``) of an encrypted file."""

    __slots__ = ("conn", "path", "sealer")

    def __init__(self, conn: apsw.Connection, path: str, sealer: Sealer | None = None) -> None:
        self.conn = conn
        self.path = path
        self.sealer = sealer

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        with _reading(self.path):
            row = self.conn.execute(statement.sqlite, params).fetchone()
        if row is None:
            return None
        if statement.opens and self.sealer is not None:
            return opened_row(self.sealer, statement, tuple(row), params)
        return tuple(row)

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        with _reading(self.path):
            found = [tuple(row) for row in self.conn.execute(statement.sqlite, params)]
        return opened_rows(self.sealer, statement, found, params)

    def rows(self, statement: Sql, params: Params = ()) -> list[Row]:
        with _reading(self.path):
            cursor = self.conn.cursor()
            cursor.row_trace = _as_dict
            found: list[Row] = list(cursor.execute(statement.sqlite, params))
        if statement.opens and self.sealer is not None:
            return open_indexed(self.sealer, statement, found, params)
        return found

    def stamp(self, moment: datetime | None) -> object:
        return None if moment is None else to_db(moment)

    def values(self, items: Sequence[str]) -> object:
        return encode_checked(list(items))

    def unpack_content(self, body: object) -> str:
        if self.sealer is not None and still_sealed(body):
            body = self.sealer.open(body)
        with _reading(self.path):  # a body that does not decode: the file is damaged
            return unpacked(body)

    def usage_sums(self, source: str, run_id: str, upto: int, last_seq: int) -> list[Any] | None:
        with _reading(self.path):
            try:
                return self.conn.execute(
                    _USAGE_SUMS.replace("{source}", source), (run_id, upto, last_seq)
                ).fetchall()
            except apsw.SQLError:  # an SQLite without the JSON functions
                return None


class ReadOnlyDatabase:
    """A zincir SQLite file opened read-only: one short connection per snapshot.

    ``encryption`` opens an encrypted file's payloads (None: the keys in
    ``$ZINCIR_ENCRYPTION_KEYS`` when it is set); without keys they read as ``‹sealed›``."""

    def __init__(
        self, path: str | os.PathLike[str], *, encryption: Encryption | None = None
    ) -> None:
        text = os.fspath(path)
        if not isinstance(text, str) or "\x00" in text or utf8(text) is None:
            raise InvalidInput(
                f"the database path {text!r} must be UTF-8 text without NUL; rename the file "
                "or folder"
            )
        self.path = os.path.abspath(text)
        self.known_version = migrations()[-1][0]
        self.usage_cache = UsageCache()
        self.encryption = resolve_encryption(encryption)

    def _connect(self) -> apsw.Connection:
        refuse_directory(self.path)
        if not os.path.isfile(self.path):
            raise NotAZincirDatabase(
                f"there is no database at {self.path}; run `zincir demo` or your application "
                "to create one, or pass --db PATH (reading never creates a database)"
            )
        uri = "file:" + quote(self.path) + "?mode=ro"
        with _reading(self.path):
            conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            register_functions(conn)
            with _reading(self.path):
                conn.setbusytimeout(5000)
                conn.execute("PRAGMA query_only=1")
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    def _tables(self, conn: apsw.Connection) -> frozenset[str]:
        """The file's tables (and which :data:`READ_COLUMNS` it has), after refusing a file
        that is not a readable zincir database."""
        try:
            applied = check_zincir_file(conn, self.path)
        except NotAZincirDatabase as error:
            raise NotAZincirDatabase(f"{error.detail} (it holds no zincir schema)") from None
        with _reading(self.path):
            tables = frozenset(
                str(name)
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')"
                )
            )
            names = encode_checked([f"{table}.{column}" for table, column in READ_COLUMNS])
            tables |= {str(name) for (name,) in conn.execute(_COLUMNS, (names,))}
        if not applied or not REQUIRED_TABLES <= tables:
            raise NotAZincirDatabase(
                f"{self.path} holds no zincir schema; run `zincir demo` or your application "
                "(which migrates it with `zincir migrate`) first, or pass --db PATH"
            )
        return tables

    def check(self) -> None:
        """Raise unless the file is a zincir database this code can read (NotAZincirDatabase,
        SchemaTooNew, DatabaseCorrupt, ...)."""
        with self.snapshot():
            pass

    def copy_to(self, target: str) -> None:
        """Copy the database, one consistent snapshot of it, into the new file ``target``
        (SQLite's backup API reading through a read-only connection: this file is never
        written). For work that must not touch the original (``zincir check-compat``)."""
        if os.path.exists(target):
            raise InvalidInput(f"{target} exists; copy_to writes a new file")
        source = self._connect()
        try:
            self._tables(source)
            with _reading(self.path):
                copy = apsw.Connection(target)
                try:
                    with copy.backup("main", source, "main") as backup:
                        while not backup.done:
                            backup.step(-1)
                finally:
                    close_quietly(copy)
        finally:
            close_quietly(source)

    @contextmanager
    def snapshot(self) -> Iterator[SnapshotReader]:
        """A :class:`SnapshotReader` over one consistent read transaction."""
        conn = self._connect()
        try:
            with _reading(self.path):
                conn.execute("BEGIN")
            tables = self._tables(conn)
            sealer = reader_sealer(
                _SqliteRead(conn, self.path), tables, self.encryption, text=False, where=self.path
            )
            yield SnapshotReader(conn, self, tables, sealer)
        finally:
            try:
                with _reading(self.path):
                    if not conn.getautocommit():
                        conn.execute("COMMIT")
            finally:
                close_quietly(conn)


class SnapshotReader(SnapshotReads):
    """The named read queries, inside one read transaction of a :class:`ReadOnlyDatabase`."""

    def __init__(
        self,
        conn: apsw.Connection,
        database: ReadOnlyDatabase,
        tables: frozenset[str],
        sealer: Sealer | None = None,
    ) -> None:
        self._conn = conn
        self._database = database
        self._tables = tables
        self._tx = _SqliteRead(conn, database.path, sealer)
        self._usage_cache = database.usage_cache

    @property
    def path(self) -> str:
        """The database file being read."""
        return self._database.path
