"""SQLiteStore: the embedded store on APSW (WAL, one group-committing writer, read connections)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from importlib import resources
from typing import Any, Literal, TypeVar

import apsw

from .._errors import InvalidInput, SchemaTooNew, StoreError
from .._json import loads_strict
from .._time import Clock, as_timedelta, from_db, system_clock, to_db
from ._models import RUN_COLUMNS, RUN_COLUMNS_SQL, Event
from ._writer import Writer, WriterStats

__all__ = ["SQLiteStore", "migrations", "sqlite_path_from_url"]

T = TypeVar("T")
Synchronous = Literal["full", "normal"]


def migrations() -> list[tuple[int, str, str]]:
    """The packaged migrations as (version, name, sql), in order."""
    found = []
    for entry in resources.files("zincir.store").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), rest.removesuffix(".sql"), entry.read_text("utf-8")))
    return sorted(found)


def sqlite_path_from_url(url_or_path: str) -> str:
    """Accept a plain path or ``sqlite:///path``; return the filesystem path."""
    if url_or_path.startswith("sqlite:///"):
        return url_or_path[len("sqlite:///"):] or ":memory:"
    if url_or_path.startswith("sqlite://"):
        raise InvalidInput(f"use sqlite:///PATH (three slashes), not {url_or_path!r}")
    return url_or_path


class SQLiteStore:
    """An opened, migrated SQLite database: one writer thread plus per-thread readers."""

    backend = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        synchronous: Synchronous = "full",
        busy_timeout: timedelta | float = timedelta(seconds=30),
        clock: Clock | None = None,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise InvalidInput(f'synchronous must be "full" or "normal", not {synchronous!r}')
        self.path = os.path.abspath(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = as_timedelta(busy_timeout, name="busy_timeout")
        self.clock: Clock = clock or system_clock
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._active_owners = 0
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreError(f"the folder {parent} does not exist; create it first")
        write_conn = self._connect(busy_ms=int(self.busy_timeout.total_seconds() * 1000))
        self._migrate(write_conn)
        write_conn.setbusytimeout(0)
        self._writer = Writer(
            write_conn, busy_timeout=self.busy_timeout.total_seconds(), path=self.path,
            full_sync=synchronous == "full",
        )

    def _connect(self, *, busy_ms: int) -> apsw.Connection:
        try:
            conn = apsw.Connection(self.path, statementcachesize=256)
            conn.setbusytimeout(busy_ms)
            mode = self._switch_to_wal(conn, busy_ms / 1000)
            if mode != "wal":
                raise StoreError(f"could not switch {self.path} to WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys=OFF")
        except apsw.Error as error:
            raise StoreError(f"cannot open SQLite database {self.path}: {error}") from None
        return conn

    @staticmethod
    def _switch_to_wal(conn: apsw.Connection, timeout: float) -> str:
        """Set WAL mode; SQLite does not call the busy handler for this pragma, so retry."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0])
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def _migrate(self, conn: apsw.Connection) -> None:
        known = migrations()
        latest = known[-1][0]
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for version, name, sql in known:
            conn.execute("BEGIN IMMEDIATE")
            try:
                applied = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                ).fetchall()
                if not applied:
                    conn.execute(sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?,?,?)",
                        (version, name, to_db(self.clock())),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        newest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchall()[0][0]
        if isinstance(newest, int) and newest > latest:
            conn.close()
            raise SchemaTooNew(
                f"{self.path} has schema version {newest}, newer than this zincir's {latest}; "
                "upgrade zincir"
            )

    # -- transactions -------------------------------------------------------------------

    async def write(self, fn: Callable[[apsw.Connection], T], *, durable: bool = True) -> T:
        """Run ``fn(connection)`` inside one (group-committed) write transaction.

        ``durable=False`` (for marks such as step claims) may skip the fsync under
        ``synchronous="full"``: the write survives a process crash but maybe not power loss.
        """
        return await self._writer.run(fn, solo=self._active_owners <= 1, durable=durable)

    @property
    def writer_stats(self) -> WriterStats:
        """How this store's writes were committed (inline, or in shared batches)."""
        return self._writer.stats

    def owner_started(self) -> None:
        """A context began writing; with more than one, writes always group-commit."""
        self._active_owners += 1

    def owner_stopped(self) -> None:
        self._active_owners = max(0, self._active_owners - 1)

    def write_sync(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Blocking :meth:`write` for code without an event loop."""
        return self._writer.run_sync(fn)

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn(connection)`` in a read snapshot on this thread's read connection."""
        return self.read_sync(fn)

    def read_sync(self, fn: Callable[[apsw.Connection], T]) -> T:
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    def _reader(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"the store at {self.path} is closed")
            conn = self._connect(busy_ms=int(self.busy_timeout.total_seconds() * 1000))
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def now(self) -> str:
        """The store's clock as stored text."""
        return to_db(self.clock())

    # -- reads shared by every layer ----------------------------------------------------

    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of ``run_id`` with seq > ``after_seq``, in order."""
        def query(conn: apsw.Connection) -> list[Event]:
            rows = conn.execute(
                "SELECT seq, type, payload, created_at FROM events "
                "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after_seq, -1 if limit is None else limit),
            )
            return [
                Event(run_id, seq, kind, loads_strict(payload), from_db(created))
                for seq, kind, payload, created in rows
            ]

        return await self.read(query)

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        """One ``agent_runs`` row as a dict, or None."""
        def query(conn: apsw.Connection) -> dict[str, Any] | None:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS_SQL} FROM agent_runs WHERE id = ?", (run_id,)
            ).fetchone()
            return None if row is None else dict(zip(RUN_COLUMNS, row, strict=True))

        return await self.read(query)

    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[dict[str, Any]]:
        """The latest runs (by update time), optionally of one status."""
        def query(conn: apsw.Connection) -> list[dict[str, Any]]:
            where, params = ("WHERE status = ?", (status,)) if status else ("", ())
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS_SQL} FROM agent_runs {where} "
                "ORDER BY updated_at DESC, id LIMIT ?",
                (*params, limit),
            )
            return [dict(zip(RUN_COLUMNS, row, strict=True)) for row in rows]

        return await self.read(query)

    async def close(self) -> None:
        """Finish pending writes and close every connection."""
        self.close_sync()

    def close_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
