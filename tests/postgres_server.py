"""A throwaway PostgreSQL server for the tests: initdb in a temporary folder, 127.0.0.1 only.

The binaries come from the highest ``/usr/lib/postgresql/*/bin`` (Debian's layout) or PATH;
``make system-deps`` installs them. Under root the server runs as the ``postgres`` system
user, since initdb refuses root. ``$ZINCIR_TEST_POSTGRES_URL`` points the tests at a server
that is already running instead; that one is never stopped and cannot be restarted.
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:  # psycopg takes ~0.1 s to import: only the tests that use a server pay it
    import psycopg
    from psycopg.rows import TupleRow

ENV_URL = "ZINCIR_TEST_POSTGRES_URL"
USER = DATABASE = "zincir"
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "300",  # the multi-process tests open many
    "shared_buffers": "32MB",
}
_START_ATTEMPTS = 5
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresError(RuntimeError):
    """The test server could not be started, stopped, restarted or administered."""


class PostgresNotInstalled(PostgresError):
    """No PostgreSQL server binaries on this machine (or no user to run them as)."""


class RestartUnsupported(PostgresError):
    """restart() on a server these tests did not start ($ZINCIR_TEST_POSTGRES_URL)."""


def find_bin_dir() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: Debian's newest version, else PATH."""

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", bin_dir.parent.name))

    debian = [
        path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb") if path.is_file()
    ]
    candidates = sorted(debian, key=version, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bin_dir in candidates:
        if all(os.access(bin_dir / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return bin_dir
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema``: libpq ``options=-csearch_path=…``."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise PostgresError(f"not a postgresql:// URL: {url!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    option = f"-csearch_path={schema}"
    merged = [
        (key, f"{value} {option}".strip() if key == "options" else value) for key, value in query
    ]
    if not any(key == "options" for key, _ in query):
        merged.append(("options", option))
    return urlunsplit(parts._replace(query=urlencode(merged, quote_via=quote)))


def schema_name(label: str, suffix: str) -> str:
    """A valid, recognisable schema name: ``t_<label>_<suffix>``, at most 63 characters."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", label.lower()).strip("_")
    return f"t_{cleaned[: 60 - len(suffix)]}_{suffix}"


class PostgresServer:
    """One PostgreSQL server for a test session, with the chores tests need around it.

    ``url`` is ``postgresql://zincir@127.0.0.1:PORT/zincir``; the role ``zincir`` is a
    superuser that needs no password. ``new_schema_url`` gives each test its own schema.
    """

    def __init__(self, external_url: str | None = None) -> None:
        self.external_url = external_url or os.environ.get(ENV_URL) or None
        self.port: int | None = None
        self.tmp_dir: Path | None = None
        self._url: str | None = None
        self._bin_dir: Path | None = None
        self._run_as: list[str] = []
        self._owner_pid = os.getpid()

    @property
    def external(self) -> bool:
        """True when the tests use a server they did not start ($ZINCIR_TEST_POSTGRES_URL)."""
        return self.external_url is not None

    @property
    def url(self) -> str:
        if self._url is None:
            raise PostgresError("the PostgreSQL test server is not started")
        return self._url

    @property
    def data_dir(self) -> Path:
        if self.tmp_dir is None:
            raise PostgresError("the PostgreSQL test server is not started")
        return self.tmp_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / "server.log"

    def start(self) -> PostgresServer:
        """initdb a fresh cluster, start it on a free port and create the ``zincir`` database."""
        if self._url is not None:
            return self
        if self.external_url is not None:
            self._url = self.external_url
            try:
                with self.admin():
                    pass  # fail here, with the URL in the message, if it cannot be reached
            except BaseException:
                self._url = None
                raise
            return self
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise PostgresNotInstalled(
                "the PostgreSQL tests need initdb, pg_ctl and postgres (none in "
                "/usr/lib/postgresql/*/bin or on PATH): run `make system-deps` as root "
                f"(it installs Debian's postgresql package), or set {ENV_URL} to a server's URL"
            )
        self._bin_dir = bin_dir
        self._run_as, owner = _unprivileged_user()
        self.tmp_dir = Path(tempfile.mkdtemp(prefix="zincir-pg-"))
        self._owner_pid = os.getpid()
        atexit.register(self._stop_at_exit)
        try:
            if owner is not None:
                os.chown(self.tmp_dir, owner.pw_uid, owner.pw_gid)
            self._initdb()
            self._start_on_a_free_port()
            with self.admin("postgres") as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``) and remove its folder; idempotent."""
        self._url = None
        if self.tmp_dir is None:
            return
        data_dir = self.data_dir
        if (data_dir / "postmaster.pid").exists():
            stopped = self._pg_ctl("stop", "-D", str(data_dir), "-m", "fast", "-w", "-t", "60")
            if stopped.returncode != 0 and (data_dir / "postmaster.pid").exists():
                raise PostgresError(
                    f"pg_ctl stop failed, server left running in {self.tmp_dir}:\n"
                    + _output(stopped)
                )
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        self.tmp_dir = None

    def restart(self) -> None:
        """Restart the server in place (``pg_ctl restart -m fast``): every connection drops."""
        if self.external_url is not None:
            raise RestartUnsupported(
                f"cannot restart the PostgreSQL server at {ENV_URL}: only a server the tests "
                "started themselves can be restarted (unset it to run this test)"
            )
        restarted = self._pg_ctl(
            "restart", "-D", str(self.data_dir), "-l", str(self.log_path), "-m", "fast", "-w"
        )
        if restarted.returncode != 0:
            raise PostgresError(f"pg_ctl restart failed:\n{_output(restarted)}{self._log_tail()}")

    def terminate_backends(self, application_name_like: str | None = None) -> int:
        """End the other connections to the database (those whose ``application_name`` is
        LIKE the pattern, if given) and wait until they are gone; returns how many ended."""
        with self.admin() as conn:
            wait = ", 5000" if conn.info.server_version >= 140000 else ""
            row = conn.execute(
                f"""
                SELECT count(*) FILTER (WHERE pg_terminate_backend(pid{wait}))
                FROM pg_stat_activity
                WHERE datname = current_database()
                  AND pid <> pg_backend_pid()
                  AND backend_type = 'client backend'
                  AND (%(like)s::text IS NULL OR application_name LIKE %(like)s::text)
                """,
                {"like": application_name_like},
            ).fetchone()
        assert row is not None
        count: int = row[0]
        return count

    def new_schema_url(self, name: str) -> str:
        """Create the empty schema ``name``; returns a URL whose connections work in it."""
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(_schema(name))))
        return with_search_path(self.url, name)

    def drop_schema(self, name: str) -> None:
        """Drop the schema ``name`` and everything in it (no error if it is already gone)."""
        import psycopg
        from psycopg import sql

        with self.admin() as conn:
            conn.execute("SET lock_timeout = '10s'")
            try:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(_schema(name))
                    )
                )
            except psycopg.errors.LockNotAvailable as error:
                raise PostgresError(
                    f"could not drop schema {name} within 10 s: a connection still holds a "
                    "lock in it (a transaction left open?)"
                ) from error

    @contextmanager
    def admin(self, database: str | None = None) -> Iterator[psycopg.Connection[TupleRow]]:
        """An autocommit connection as the superuser, to ``database`` or the URL's own."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        conninfo = make_conninfo(self.url, dbname=database) if database else self.url
        try:
            conn = psycopg.connect(
                conninfo, autocommit=True, application_name="zincir-test-admin", connect_timeout=10
            )
        except psycopg.OperationalError as error:
            raise PostgresError(f"cannot connect to {self.url}: {error}") from error
        with conn:
            yield conn

    def _initdb(self) -> None:
        initdb = self._run(
            "initdb",
            *("-D", str(self.data_dir), "-A", "trust", "-U", USER),
            *("-E", "UTF8", "--no-locale", "--no-sync"),
        )
        if initdb.returncode != 0:
            raise PostgresError(f"initdb failed in {self.tmp_dir}:\n{_output(initdb)}")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude 'zincir.conf'\n")

    def _start_on_a_free_port(self) -> None:
        """Another process may take the port between free_port() and the bind: try anew."""
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = free_port()
            self._write_settings(port)
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            started = self._pg_ctl(
                "start", "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", "60"
            )
            if started.returncode == 0:
                self.port = port
                self._url = f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}"
                return
            log = self.log_path.read_text(errors="replace")[log_start:]
            port_taken = "could not bind" in log or "could not create any TCP/IP" in log
            if not port_taken or attempt == _START_ATTEMPTS:
                raise PostgresError(
                    f"the PostgreSQL test server did not start (attempt {attempt}, port "
                    f"{port}):\n{_output(started)}{self._log_tail()}"
                )
        raise AssertionError("unreachable")

    def _write_settings(self, port: int) -> None:
        settings = {
            **SETTINGS,
            "port": str(port),
            "unix_socket_directories": _quoted(str(self.data_dir.parent)),
        }
        path = self.data_dir / "zincir.conf"
        path.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        stat = self.data_dir.stat()
        if os.geteuid() == 0:
            os.chown(path, stat.st_uid, stat.st_gid)

    def _log_tail(self, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except (OSError, PostgresError):
            return ""
        return f"\n--- last lines of {self.log_path} ---\n" + "\n".join(tail)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", *args)

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        assert self._bin_dir is not None and self.tmp_dir is not None
        return subprocess.run(
            [*self._run_as, str(self._bin_dir / program), *args],
            cwd=self.tmp_dir,  # the postgres user may not be able to enter ours
            env={key: value for key, value in os.environ.items() if not key.startswith("PG")},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def _stop_at_exit(self) -> None:
        if os.getpid() == self._owner_pid:  # not in a forked child that exits normally
            self.stop()


def _unprivileged_user() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that drops root for the ``postgres`` user, and that user."""
    if os.geteuid() != 0:
        return [], None
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresNotInstalled(
            "running as root, the PostgreSQL tests start the server as the `postgres` system "
            "user, which does not exist: run `make system-deps` (Debian's postgresql package "
            f"creates it), run the tests as another user, or set {ENV_URL}"
        ) from None
    if shutil.which("runuser"):
        return ["runuser", "-u", owner.pw_name, "--"], owner
    if shutil.which("setpriv"):
        return [
            *("setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}"),
            *("--init-groups", "--"),
        ], owner
    raise PostgresNotInstalled("running as root needs runuser or setpriv (util-linux)")


def _schema(name: str) -> str:
    if not _SCHEMA_NAME.fullmatch(name):
        raise ValueError(f"schema name must match {_SCHEMA_NAME.pattern}: {name!r}")
    return name


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return "\n".join(part.strip() for part in (done.stdout, done.stderr) if part.strip())
