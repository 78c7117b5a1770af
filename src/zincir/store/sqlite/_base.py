"""The SQLite backend's foundation: opening (and refusing) a file, migrations, transactions.

Opening checks the file before it changes anything: a file that is not SQLite, or that
holds another application's tables, is refused untouched (no WAL switch, no migration); a
read-only file is refused before the first write. Every transaction function runs through
:meth:`SQLiteBase._write` or :meth:`SQLiteBase._read`, inside the driver-error boundary.

The write contract: a transaction function receives the write connection, must touch only
that connection (no I/O, no shared state), and may run more than once, because the writer
re-runs a batch job by job after one of them failed, and re-queues a batch whose
``COMMIT`` found the database busy. Only its last run's effects are committed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

import apsw

from ..._encryption import Encryption, Sealer, resolve_encryption
from ..._errors import (
    DatabaseReadOnly,
    InvalidInput,
    NotAZincirDatabase,
    SchemaTooNew,
    StoreError,
)
from ..._time import Clock, system_clock, to_db
from ..._validate import check_duration
from .._content import ContentIndex
from .._grouping import writes_grouped
from .._held_leases import HeldLeases
from .._migrations import packaged_migrations
from .._records import Lease
from .._sealing import settle_encryption
from ._content import convert_rows
from ._errors import DRIVER_ERRORS, close_quietly, translate, translating
from ._log import register_functions
from ._writer import Writer, WriterStats, read_transaction

__all__ = ["SQLiteBase", "Synchronous", "migrations", "one", "sqlite_path_from_url"]

T = TypeVar("T")
Synchronous = Literal["full", "normal"]
Conn = apsw.Connection

_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


_CONVERSIONS: dict[str, Callable[[Conn], object]] = {"content_rows": convert_rows}
"""Migrations whose rows Python converts, in batches, before the step is recorded."""


def one(
    conn: Conn, sql: str, params: tuple[object, ...] | dict[str, object] = ()
) -> tuple[Any, ...]:
    """The one row a statement must return (an aggregate, an ``UPDATE … RETURNING``)."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise StoreError(f"expected a row from: {sql.split(' WHERE ')[0]}")
    return tuple(row)


def migrations() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, name, sql), in order."""
    return list(packaged_migrations("zincir.store.sqlite"))


def _too_new(path: str, newest: int, latest: int) -> SchemaTooNew:
    return SchemaTooNew(
        f"{path} has schema version {newest}, newer than this zincir's {latest}; upgrade zincir"
    )


def sqlite_path_from_url(url_or_path: str) -> str:
    """Accept a plain path or ``sqlite:///path``; return the filesystem path."""
    if url_or_path.startswith("sqlite:///"):
        return url_or_path[len("sqlite:///") :] or ":memory:"
    if url_or_path.startswith("sqlite://"):
        raise InvalidInput(f"use sqlite:///PATH (three slashes), not {url_or_path!r}")
    return url_or_path


def refuse_directory(path: str) -> None:
    """A folder given as the database path is named as one, with the file to pass instead."""
    if os.path.isdir(path):
        raise InvalidInput(
            f"the database path {path} is a directory; pass a database file, such as "
            f"{os.path.join(path, 'zincir.db')}"
        )


def check_zincir_file(conn: Conn, path: str) -> frozenset[int]:
    """The applied migrations of a zincir database (none for an empty file).

    Raises NotAZincirDatabase for a file that is not SQLite or holds other tables, and
    SchemaTooNew for a database migrated by a newer zincir. Reads only.
    """
    known = {version: name for version, name, _ in migrations()}
    with translating(path):
        tables = {
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            )
        }
    if not tables:
        return frozenset()
    foreign = NotAZincirDatabase(
        f"{path} holds another application's tables ({', '.join(sorted(tables)[:5])}); "
        "zincir opens only its own database: point it at a new file"
    )
    if "schema_migrations" not in tables:
        raise foreign
    try:
        applied = [
            (int(v), str(n))
            for v, n in conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        ]
    except (apsw.CorruptError, apsw.IOError, apsw.BusyError) as error:
        raise translate(error, path) from None
    except (apsw.Error, TypeError, ValueError):
        raise foreign from None
    newest = applied[-1][0] if applied else None
    latest = max(known)
    if newest is not None and newest > latest:
        raise _too_new(path, newest, latest)
    if any(known.get(version) != name for version, name in applied):
        raise foreign
    if applied and "agent_runs" not in tables:
        raise foreign
    return frozenset(version for version, _ in applied)


class SQLiteBase(HeldLeases):
    """An opened, migrated SQLite database: one writer plus per-thread read connections.

    ``single_process=True`` opens the file in SQLite's exclusive locking mode: this store's
    one connection takes every lock once and keeps it, so no transaction pays for taking
    and releasing them, and reads run on that connection too, between commits. No other
    process (and no other store object) can read or write the file until this store is
    closed: no ``zincir ui``, ``zincir runs`` or ResumeWorker elsewhere meanwhile.
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        synchronous: Synchronous = "full",
        busy_timeout: timedelta | float = timedelta(seconds=30),
        clock: Clock | None = None,
        single_process: bool = False,
        encryption: Encryption | None = None,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise InvalidInput(f'synchronous must be "full" or "normal", not {synchronous!r}')
        if not isinstance(single_process, bool):
            raise InvalidInput(f"single_process must be True or False, not {single_process!r}")
        if not isinstance(path, str) or (path != ":memory:" and "\x00" in path):
            raise InvalidInput(f"a database path must be text without NUL, not {path!r}")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(
                f"the database path {path!r} is not valid UTF-8; rename the file or folder"
            ) from None
        self.path = os.path.abspath(path)
        if path != ":memory:":
            refuse_directory(self.path)
        self.synchronous: Synchronous = synchronous
        self.single_process = single_process
        self.busy_timeout = check_duration(busy_timeout, "busy_timeout", maximum=timedelta(days=1))
        if clock is not None and not callable(clock):
            raise InvalidInput(
                f"clock must be a callable returning an aware datetime, not {clock!r}"
            )
        self.clock: Clock = clock or system_clock
        self._busy_ms = int(self.busy_timeout.total_seconds() * 1000)
        self._local = threading.local()
        self._readers: list[Conn] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._leases: dict[str, Lease] = {}
        self._content = ContentIndex()
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreError(f"the folder {parent} does not exist; create it first")
        write_conn, applied = self._open_checked()
        try:
            if applied != {version for version, _, _ in migrations()}:
                self._migrate(write_conn)
            self.sealer = self._settle_encryption(write_conn, encryption)
        except BaseException:
            close_quietly(write_conn)
            raise
        write_conn.setbusytimeout(0)
        self._writer = Writer(
            write_conn,
            busy_timeout=self.busy_timeout.total_seconds(),
            path=self.path,
            full_sync=synchronous == "full",
        )

    # -- opening ------------------------------------------------------------------------

    def _open_checked(self) -> tuple[Conn, frozenset[int]]:
        """The write connection and the file's applied migrations, after the file was found
        to be zincir's (none: a new file)."""
        with translating(self.path):
            conn = apsw.Connection(self.path, statementcachesize=256)
        try:
            register_functions(conn)
            conn.setbusytimeout(self._busy_ms)
            if self.single_process:  # before the first read: then SQLite keeps no -shm file
                conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            applied = check_zincir_file(conn, self.path)
            if conn.readonly("main"):
                raise DatabaseReadOnly(
                    f"{self.path} is read-only; zincir needs to write it (the inspector, "
                    "`zincir ui`, reads a database it cannot write)"
                )
            self._configure(conn)
        except BaseException:
            close_quietly(conn)
            raise
        return conn, applied

    def _settle_encryption(self, conn: Conn, encryption: Encryption | None) -> Sealer | None:
        """The store's sealer, settled in one write transaction (see ``_sealing``)."""
        from ._tx import SqliteTx  # the rule seam's transaction, built on this base

        encryption = resolve_encryption(encryption)
        with translating(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                sealer = settle_encryption(
                    SqliteTx(conn, self.clock()), encryption, text=False, where=self.path
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return sealer

    def _vacuum(self, tables: tuple[str, ...]) -> None:
        """Rewrite the file (``VACUUM``) and truncate the WAL, so no freed page keeps an old
        value; writers wait meanwhile."""
        with translating(self.path):
            conn = apsw.Connection(self.path)
            try:
                conn.set_busy_timeout(self._busy_ms)
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()

    def _configure(self, conn: Conn) -> None:
        with translating(self.path):
            mode = self._switch_to_wal(conn, self._busy_ms / 1000)
            if mode != "wal":
                raise StoreError(f"could not switch {self.path} to WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys=OFF")

    @staticmethod
    def _switch_to_wal(conn: Conn, timeout: float) -> str:
        """Set WAL mode; SQLite does not call the busy handler for this pragma, so retry."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0])
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def _migrate(self, conn: Conn) -> None:
        """Apply each missing migration in its own transaction with its schema_migrations row."""
        known = migrations()
        with translating(self.path):
            conn.execute(_MIGRATIONS_TABLE)
            for version, name, sql in known:
                convert = _CONVERSIONS.get(name)
                if (
                    convert is not None
                    and not conn.execute(
                        "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                    ).fetchall()
                ):
                    convert(conn)  # data moved in bounded transactions of its own first
                conn.execute("BEGIN IMMEDIATE")
                try:
                    applied = conn.execute(
                        "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                    ).fetchall()
                    if not applied:
                        conn.execute(sql)
                        conn.execute(
                            "INSERT INTO schema_migrations (version, name, applied_at) "
                            "VALUES (?, ?, ?)",
                            (version, name, to_db(self.clock())),
                        )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            # A newer zincir may have migrated the file meanwhile.
            (newest,) = one(conn, "SELECT MAX(version) FROM schema_migrations")
        if newest > known[-1][0]:
            raise _too_new(self.path, newest, known[-1][0])

    # -- transactions -------------------------------------------------------------------

    async def _write(self, fn: Callable[[Conn], T], *, durable: bool = True) -> T:
        """Run ``fn(connection)`` in one (group-committed) write transaction.

        ``durable=False`` (for marks such as step claims) may skip the fsync under
        ``synchronous="full"``: the write survives a process crash but maybe not power loss.
        See the module docstring for what ``fn`` may do; the writer translates the driver
        errors it raises.
        """
        solo = len(self._leases) <= 1 and not writes_grouped()
        return await self._writer.run(fn, solo=solo, durable=durable)

    async def _read(self, fn: Callable[[Conn], T], *, offload: bool = False) -> T:
        """Run ``fn(connection)`` in one read snapshot.

        Point reads run on the calling thread (they take microseconds); ``offload=True``
        runs a read that may scan (an event log, a run list) on a worker thread, so the
        event loop keeps serving meanwhile.
        """
        if offload:
            return await asyncio.to_thread(self._read_now, fn)
        return self._read_now(fn)

    def _read_now(self, fn: Callable[[Conn], T]) -> T:
        if self.single_process:  # the writer's connection holds the file: read through it
            return self._writer.read(fn)
        try:
            conn = self._reader()
        except DRIVER_ERRORS as error:
            raise translate(error, self.path) from None
        return read_transaction(conn, fn, self.path)

    def _reader(self) -> Conn:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            conn = apsw.Connection(self.path, statementcachesize=256)
            register_functions(conn)
            conn.setbusytimeout(self._busy_ms)
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def now(self) -> datetime:
        """The store's clock (an aware UTC datetime)."""
        return self.clock()

    @property
    def writer_stats(self) -> WriterStats:
        """How this store's writes were committed (inline, or in shared batches)."""
        return self._writer.stats

    # -- wake-ups -------------------------------------------------------------------------

    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool:
        """Wait ``timeout`` seconds: an embedded database has no server to tell waiters of
        other processes' commits, so they poll (False: no notification)."""
        await asyncio.sleep(timeout)
        return False

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        """Finish pending writes and close every connection."""
        self.close_sync()

    def close_sync(self) -> None:
        """Blocking :meth:`close` for code without an event loop."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        finally:
            with self._readers_lock:  # a reader's close can only fail its checkpoint: no loss
                readers, self._readers = self._readers, []
                for conn in readers:
                    close_quietly(conn)
