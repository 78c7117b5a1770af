"""Small test helpers that read the database directly (never to fake a crash)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import apsw
import pytest

import zincir
from zincir._time import to_db
from zincir.store import Store

REPO = Path(__file__).resolve().parents[1]

T = TypeVar("T")


def rows(db_path: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run a read-only query on a separate connection (waiting, as zincir's readers do, while
    another process holds the file's lock: recovering a killed writer's WAL, say)."""
    conn = apsw.Connection(
        f"file:{db_path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    conn.set_busy_timeout(10_000)
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def event_types(target: Path | str, run_id: str) -> list[str]:
    """The types of a run's events in seq order (either backend)."""
    return [
        t
        for (t,) in select(
            target, "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
    ]


def seqs(target: Path | str, run_id: str) -> list[int]:
    """The seqs of a run's events in order (either backend)."""
    return [
        s
        for (s,) in select(
            target, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
    ]


def count(target: Path | str, table: str) -> int:
    """The rows of ``table`` (either backend)."""
    return int(select(target, f"SELECT COUNT(*) FROM {table}")[0][0])


BOTH_BACKENDS = ("sqlite", "postgres")
"""The backends a test parametrised with :func:`backend_target` runs on (ids as named)."""


def backend_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database for the backend ``request.param`` names, as the target child
    processes pass to ``zincir.open_store``: a SQLite file in ``tmp_path``, or the
    ``postgres_url`` fixture's own schema (the server starts only for a postgres test)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "zincir.db")


def is_postgres(target: Path | str) -> bool:
    """True for a PostgreSQL URL, False for a SQLite path."""
    return str(target).startswith(("postgresql://", "postgres://"))


def select(target: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read-only SELECT on either backend: the SQLite file, or the PostgreSQL URL's
    schema. ``sql`` uses ``?`` placeholders (no ``?`` or ``%`` in literals); timestamps come
    back as zincir's stored text on both, so a test compares the same values on each."""
    if not is_postgres(target):
        return rows(target, sql, params)
    import psycopg
    from psycopg import sql as pgsql

    from zincir.store.postgres._base import split_schema

    conninfo, schema, _ = split_schema(str(target))
    with psycopg.connect(conninfo) as conn:
        conn.read_only = True
        conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(schema)))
        found = conn.execute(sql.replace("?", "%s"), params or None).fetchall()
    return [
        tuple(to_db(value) if isinstance(value, datetime) else value for value in row)
        for row in found
    ]


async def read_store(target: Path | str, read: Callable[[Store], Awaitable[T]]) -> T:
    """``read(store)`` on a store opened on ``target`` for just this read (either backend)."""
    store = zincir.open_store(target)
    try:
        return await read(store)
    finally:
        await store.close()


WHOLE_RECORD = "record, input_json, run_id, step_id, sequence, kind, handler_id, input_digest"
"""The ``operations`` columns :func:`whole_record` composes a row's record from, in order."""


def whole_record(record: str | None, input_json: str, *identity: Any) -> str | None:
    """A stored record made whole from the columns :data:`WHOLE_RECORD` names: a record is
    stored without the identity, input digest and input its row's columns hold
    (``Store.get_operation`` composes it the same way)."""
    from zincir.contract._codec import record_with_input
    from zincir.store._content import record_with_identity

    if record is None:
        return None
    whole = record_with_identity(record, (*identity[:2], int(identity[2]), *identity[3:]))
    return record_with_input(whole, input_json)


def kill_at_line(script: Path | str, args: Sequence[str], env: dict[str, str] | None = None) -> str:
    """Run ``script`` (with src/ and the repository importable), read its first line of
    output, then SIGKILL it: a crash at the point the script announces. The line."""
    paths = os.pathsep.join([str(REPO / "src"), str(REPO)])
    child = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": paths, **(env or {})},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
    finally:
        child.send_signal(signal.SIGKILL)
        _, errors = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, errors
    assert line, f"{script} printed nothing before it was to be killed:\n{errors}"
    return line
