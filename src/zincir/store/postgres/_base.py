"""The PostgreSQL backend's foundation: the schema, migrations, pools and transactions.

A store lives in one schema of a database (``zincir`` unless the URL names another with
``?schema=NAME``, or its ``options`` set a ``search_path``); opening creates the schema and
applies the missing migrations under an advisory lock, so several processes may open it at
once. A schema holding another application's tables is refused untouched.

Time is the database's: statements judge leases, claims and timers with ``zincir_now()``,
the server's transaction time, never a worker's clock. A store opened with ``clock=`` (tests)
pins ``zincir_now()`` to that clock in each of its transactions instead.

The transaction contract: a transaction function receives a psycopg connection inside an
open transaction, runs on a worker thread, must touch only that connection, and may run
more than once (the transaction is run again after a deadlock or serialization failure).
The hottest writes (a step's claim and result) are single statements run as their own
autocommit transactions (:meth:`PostgresBase._write_one`): no ``BEGIN``/``COMMIT`` round
trips, their fence and checks inside the statement (``zincir_fail`` aborts it).
Driver errors become zincir errors at :meth:`PostgresBase._write` / :meth:`_read`.

Waiters (a workflow's recv and join, a ResumeWorker between polls) are woken by
LISTEN/NOTIFY (:mod:`._wake`) and keep polling as the fallback.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ..._crash import crash_point
from ..._encryption import Encryption, Sealer, resolve_encryption
from ..._errors import (
    ConnectionLost,
    InvalidInput,
    NotAZincirDatabase,
    SchemaTooNew,
    StoreError,
    ZincirError,
)
from ..._time import Clock
from .._content import ContentIndex
from .._held_leases import HeldLeases
from .._migrations import packaged_migrations
from .._records import Lease
from .._sealing import settle_encryption
from ._errors import DRIVER_ERRORS, RETRYABLE, translate, translating
from ._wake import Listener

__all__ = [
    "CHECK_FAILED",
    "CheckFailed",
    "Conn",
    "PostgresBase",
    "migrations",
    "split_schema",
]

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]

DEFAULT_SCHEMA = "zincir"
CHECK_FAILED = "ZC001"
"""The SQLSTATE of ``zincir_fail(reason)``: a single-statement write's check failed."""
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RETRIES = 8  # a transaction aborted by a deadlock or serialization failure runs again
_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)"
)


class CheckFailed(Exception):
    """A single-statement write called ``zincir_fail(reason)``: nothing was stored."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _convert_content_rows(conn: Conn) -> object:
    from ._content import convert_rows  # it imports this module

    return convert_rows(conn)


_CONVERSIONS: dict[str, Callable[[Conn], object]] = {"content_rows": _convert_content_rows}
"""Migrations whose rows Python converts, in batches, before the step is recorded."""


def migrations() -> list[tuple[int, str, str]]:
    """The packaged PostgreSQL migrations as (version, name, sql), in order."""
    return list(packaged_migrations("zincir.store.postgres"))


def split_schema(url: str) -> tuple[str, str, str]:
    """(connection URL without zincir's ``schema`` parameter, the schema, a printable name
    without the password). InvalidInput for a malformed URL or schema name."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    rest = [(key, value) for key, value in query if key != "schema"]
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:
        raise InvalidInput(f"not a PostgreSQL URL ({error})") from None
    if named:
        schema = named[-1]
    else:
        found = re.search(r"search_path\s*=\s*([^\s,]+)", str(params.get("options") or ""))
        schema = found.group(1).strip("\"'") if found else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidInput(
            f"schema {schema!r} is not a plain lower-case PostgreSQL identifier "
            "(a-z, 0-9, _; at most 63)"
        )
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    user = f"{params['user']}@" if params.get("user") else ""
    where = f"postgresql://{user}{host}{port}/{params.get('dbname', '')}?schema={schema}"
    return conninfo, schema, where


class PostgresBase(HeldLeases):
    """An opened, migrated PostgreSQL schema: pools of write, unsynced-write (step claims)
    and read-only connections, the worker threads that use them, and a LISTEN connection."""

    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        pool_size: int = 8,
        connect_timeout: timedelta | float = timedelta(seconds=30),
        encryption: Encryption | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise InvalidInput(f"a PostgreSQL store needs a postgresql:// URL, not {url!r}")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise InvalidInput(f"pool_size must be a positive int, not {pool_size!r}")
        if clock is not None and not callable(clock):
            raise InvalidInput(
                f"clock must be a callable returning an aware datetime, not {clock!r}"
            )
        seconds = (
            connect_timeout.total_seconds()
            if isinstance(connect_timeout, timedelta)
            else float(connect_timeout)
        )
        self._conninfo, self.schema, self.path = split_schema(url)
        self._pinned: Clock | None = clock
        self._offset = timedelta(0)
        self.clock: Clock = clock or self._server_clock
        self._leases: dict[str, Lease] = {}
        self._content = ContentIndex()
        self._in_flight = 0
        self._closed = False
        self._lock = threading.Lock()
        params = conninfo_to_dict(self._conninfo)
        options = f"-c search_path={self.schema} -c TimeZone=UTC"
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "options": f"{params.get('options') or ''} {options}".strip(),
            "connect_timeout": max(1, int(seconds)),
            "application_name": params.get("application_name") or "zincir",
            # A server that goes silent (a partition) fails the call instead of hanging it.
            "tcp_user_timeout": 10_000,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 2,
        }
        encryption = resolve_encryption(encryption)
        self._migrate()
        self.sealer = self._settle_encryption(encryption)
        self._writers = self._pool("zincir-writers", pool_size, seconds, read_only=False)
        self._readers = self._pool("zincir-readers", pool_size, seconds, read_only=True)
        self._unsynced = self._pool(
            "zincir-unsynced", max(2, pool_size // 2), seconds, read_only=False, synced=False
        )
        self._executor = ThreadPoolExecutor(
            max_workers=2 * pool_size, thread_name_prefix="zincir-postgres"
        )
        self._listener = Listener(self._conninfo, self._connect_kwargs, self.schema)

    # -- opening ------------------------------------------------------------------------

    def _connect(self) -> Conn:
        with translating(self.path):
            conn: Conn = psycopg.connect(self._conninfo, **self._connect_kwargs)
        return conn

    def _pool(
        self, name: str, size: int, timeout: float, *, read_only: bool, synced: bool = True
    ) -> psycopg_pool.ConnectionPool[Conn]:
        def configure(conn: Conn) -> None:
            if read_only:
                conn.read_only = True
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            if not synced:
                conn.execute("SET synchronous_commit = off")

        def reset(conn: Conn) -> None:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()

        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self._conninfo,
            kwargs=self._connect_kwargs,
            min_size=1 if synced else 0,
            max_size=size,
            timeout=timeout,
            name=name,
            configure=configure,
            reset=reset,
            open=False,
        )
        with translating(self.path):
            pool.open(wait=True, timeout=timeout)
        return pool

    def _settle_encryption(self, encryption: Encryption | None) -> Sealer | None:
        """The store's sealer, settled in one transaction (see ``_sealing``)."""
        from ._tx import PostgresTx  # the rule seam's transaction, built on this base

        with self._connect() as conn, translating(self.path), conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext('zincir.migrate.' || %s))", (self.schema,)
            )
            where = f"schema {self.schema!r} of {self.path}"
            return settle_encryption(PostgresTx(conn), encryption, text=True, where=where)

    def _vacuum(self, tables: tuple[str, ...]) -> None:
        """``VACUUM FULL`` each of ``tables`` (each locked meanwhile), so no dead row keeps an
        old value; the server's WAL archive and backups are not touched."""
        with self._connect() as conn, translating(self.path):  # autocommit, in the schema
            for table in tables:
                conn.execute(sql.SQL("VACUUM FULL {}").format(sql.Identifier(table)))

    def _migrate(self) -> None:
        """Create the schema if needed and apply each missing migration, under an advisory
        lock on the schema so that processes opening it together apply each once."""
        known = migrations()
        latest = known[-1][0]
        with self._connect() as conn, translating(self.path):
            before = time.time()
            (server_now,) = conn.execute("SELECT clock_timestamp()").fetchone() or (None,)
            after = time.time()
            if isinstance(server_now, datetime):
                local = datetime.fromtimestamp((before + after) / 2, UTC)
                self._offset = server_now - local
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('zincir.migrate.' || %s))",
                    (self.schema,),
                )
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
                applied = self._check_schema(conn, latest)
                conn.execute(_MIGRATIONS_TABLE)
                deferred: tuple[int, str, str] | None = None
                for version, name, text in known:
                    if version in applied:
                        continue
                    if name in _CONVERSIONS:
                        deferred = (version, name, text)
                        break
                    conn.execute(text.encode("utf-8"))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) "
                        "VALUES (%s, %s, clock_timestamp())",
                        (version, name),
                    )
            if deferred is None:
                return
            # Rows converted in bounded transactions of their own (a killed process resumes
            # them), then the step recorded, and any later migration applied.
            version, name, text = deferred
            _CONVERSIONS[name](conn)
            with conn.transaction():
                conn.execute(text.encode("utf-8"))
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) "
                    "VALUES (%s, %s, clock_timestamp()) ON CONFLICT (version) DO NOTHING",
                    (version, name),
                )
        self._migrate()

    def _check_schema(self, conn: Conn, latest: int) -> set[int]:
        """The applied migrations of the schema; NotAZincirDatabase for another
        application's tables, SchemaTooNew for a newer zincir's schema."""
        tables = {
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (self.schema,),
            )
        }
        if not tables:
            return set()
        if "schema_migrations" not in tables or "agent_runs" not in tables and len(tables) > 1:
            raise NotAZincirDatabase(
                f"schema {self.schema!r} of {self.path} holds another application's tables "
                f"({', '.join(sorted(tables)[:5])}); give zincir its own schema (?schema=NAME)"
            )
        applied = {
            int(version): str(name)
            for version, name in conn.execute("SELECT version, name FROM schema_migrations")
        }
        newest = max(applied, default=0)
        if newest > latest:
            raise SchemaTooNew(
                f"{self.path} has schema version {newest}, newer than this zincir's "
                f"{latest}; upgrade zincir"
            )
        return set(applied)

    # -- time -----------------------------------------------------------------------------

    def _server_clock(self) -> datetime:
        """This machine's clock corrected by the server's offset measured when opening."""
        return datetime.now(UTC) + self._offset

    def now(self) -> datetime:
        """The store's clock (an aware UTC datetime): the server's, or the pinned one."""
        return self.clock()

    # -- transactions -------------------------------------------------------------------

    async def _write(self, fn: Callable[[Conn], T], *, durable: bool = True) -> T:
        """Run ``fn(connection)`` in one write transaction.

        ``durable=False`` (marks such as step claims) commits with ``synchronous_commit``
        off: the write survives a crash of this process but maybe not of the server.
        """
        return await self._run(self._write_now, fn, durable)

    async def _write_one(
        self, query: str, params: tuple[object, ...] | dict[str, object], *, durable: bool = True
    ) -> tuple[Any, ...] | None:
        """Run one statement as its own transaction (autocommit: no ``BEGIN``/``COMMIT``
        round trips) and return its first row. The statement must be atomic on its own:
        its fence and its effects in one ``WITH`` (``zincir_fail`` aborts it)."""
        if self._pinned is not None:  # the pinned clock needs a transaction to set it in
            return await self._write(
                lambda conn: conn.execute(query, params).fetchone(), durable=durable
            )
        return await self._run(self._write_one_now, query, params, durable)

    def _write_one_now(
        self, query: str, params: tuple[object, ...] | dict[str, object], durable: bool
    ) -> tuple[Any, ...] | None:
        pool = self._writers if durable else self._unsynced
        attempt = 0
        while True:
            try:
                if self._closed:
                    raise StoreError(f"the store at {self.path} is closed")
                with pool.connection() as conn:
                    crash_point("store.before_begin")
                    row = conn.execute(query, params).fetchone()
                    crash_point("store.after_commit")
                    return row
            except psycopg.Error as error:
                if error.sqlstate == CHECK_FAILED:
                    raise CheckFailed(error.diag.message_primary or "") from None
                if isinstance(error, RETRYABLE):
                    attempt += 1
                    if attempt < _RETRIES:
                        time.sleep(0.001 * attempt)
                        continue
                raise self._failed(error) from None
            except DRIVER_ERRORS as error:
                raise self._failed(error) from None

    def _failed(self, error: BaseException) -> ZincirError:
        """The zincir error for ``error``; after a broken connection, every pool drops its
        other broken idle connections too, so the next call gets a live one."""
        translated = translate(error, self.path)
        if isinstance(translated, ConnectionLost) and not self._closed:
            for pool in (self._writers, self._readers, self._unsynced):
                pool.check()
        return translated

    async def _run(self, blocking: Callable[..., T], *args: Any) -> T:
        """Call ``blocking(*args)``: on the calling thread when nothing else of this store is
        in flight (a thread hop costs more than a loopback round trip), else on a worker
        thread so that concurrent callers overlap. An inline call yields to the event loop
        once it returns, and connections time out a silent server (``tcp_user_timeout``), so
        no caller can hold the event loop for long."""
        self._in_flight += 1
        try:
            if self._in_flight > 1:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._executor, blocking, *args)
            result = blocking(*args)
        finally:
            self._in_flight -= 1
        await asyncio.sleep(0)  # let other tasks (a heartbeat, other runs) in between calls
        return result

    def _write_now(self, fn: Callable[[Conn], T], durable: bool = True) -> T:
        """Blocking :meth:`_write`, for code without an event loop."""
        attempt = 0
        while True:
            try:
                with self._writers.connection() as conn:
                    crash_point("store.before_begin")
                    with conn.transaction():
                        crash_point("store.after_begin")
                        self._start(conn, durable=durable)
                        result = fn(conn)
                        crash_point("store.after_statements")
                    crash_point("store.after_commit")
                    return result
            except psycopg.Error as error:
                if error.sqlstate == CHECK_FAILED:
                    raise CheckFailed(error.diag.message_primary or "") from None
                if not isinstance(error, RETRYABLE):
                    raise self._failed(error) from None
                attempt += 1
                if attempt >= _RETRIES:
                    raise self._failed(error) from None
                time.sleep(0.001 * attempt)
            except DRIVER_ERRORS as error:
                raise self._failed(error) from None

    async def _read(self, fn: Callable[[Conn], T], *, offload: bool = False) -> T:
        """Run ``fn(connection)`` in one read-only, repeatable-read snapshot; ``offload``
        (a read that may scan) always runs on a worker thread."""
        if offload:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._read_now, fn)
        return await self._run(self._read_now, fn)

    def _read_now(self, fn: Callable[[Conn], T]) -> T:
        """Blocking :meth:`_read`."""
        try:
            with self._readers.connection() as conn, conn.transaction():
                self._start(conn, durable=True)
                return fn(conn)
        except DRIVER_ERRORS as error:
            raise self._failed(error) from None

    def _start(self, conn: Conn, *, durable: bool) -> None:
        """Settings of the transaction just begun: a pinned clock, an unsynced commit."""
        if self._closed:
            raise StoreError(f"the store at {self.path} is closed")
        if self._pinned is not None:
            conn.execute("SELECT set_config('zincir.now', %s, true)", (self._pinned().isoformat(),))
        if not durable:
            conn.execute("SELECT set_config('synchronous_commit', 'off', true)")

    # -- wake-ups -------------------------------------------------------------------------

    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a committed change that may concern ``run_id``
        (a message to it, a child of it finished; None: any run became claimable), told by
        LISTEN/NOTIFY; True if one came. Callers poll again either way."""
        return await self._listener.wait(run_id, timeout)

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        """Finish the writes in flight and close every connection."""
        await asyncio.get_running_loop().run_in_executor(None, self.close_sync)

    def close_sync(self) -> None:
        """Blocking :meth:`close` for code without an event loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._listener.close()
        self._executor.shutdown(wait=True)
        self._writers.close()
        self._readers.close()
        self._unsynced.close()
