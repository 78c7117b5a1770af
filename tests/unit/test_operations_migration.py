"""Migration 0006: ``operations`` becomes a rowid table with a unique index on the identity,
keeping every row of a database at schema version 5."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest

import zincir
from tests.conftest import START
from tests.helpers import WHOLE_RECORD, rows, whole_record
from tests.runtime_conformance import Calls, make_invocation, never_called, registry_with
from zincir import InputDrift
from zincir.contract import Record, Success, encode_record
from zincir.durable import LocalRuntime
from zincir.durable._operations import new_operation
from zincir.store import migrations
from zincir.testing import FakeClock

COLUMNS = (
    "run_id, step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome, "
    "record, claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at, "
    "claim_lease_owner, claim_lease_token"
)


def schema_5(db_path: Path) -> None:
    """A database migrated to version 5 by hand, as a zincir of that version left it."""
    conn = apsw.Connection(str(db_path))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        applied = [m for m in migrations() if m[0] <= 5]
        assert [version for version, _, _ in applied] == [1, 2, 3, 4, 5]
        for version, name, sql in applied:
            with conn:
                conn.execute(sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, "2030-01-01T00:00:00.000000Z"),
                )
    finally:
        conn.close()


def insert_operations(db_path: Path, values: list[tuple[Any, ...]]) -> None:
    conn = apsw.Connection(str(db_path))
    try:
        with conn:
            conn.executemany(
                f"INSERT INTO operations ({COLUMNS}) VALUES ({', '.join('?' * 18)})", values
            )
    finally:
        conn.close()


def operation_values(
    record: Record, *, status: str, owner: str | None, lease: tuple[str | None, int | None]
) -> tuple[Any, ...]:
    invocation = record.invocation
    completed = status == "completed"
    return (
        invocation.run_id,
        invocation.step_id,
        invocation.sequence,
        str(invocation.kind),
        invocation.handler_id,
        invocation.input_digest(),
        invocation.input_json,
        status,
        "success" if completed else None,
        encode_record(record) if completed else None,
        owner,
        None if completed else "2030-01-01T00:10:00.000000Z",
        3 if completed else 1,
        "2030-01-01T00:00:00.000000Z",
        "2030-01-01T00:00:01.000000Z",
        "2030-01-01T00:00:01.000000Z" if completed else None,
        *lease,
    )


def is_without_rowid(db_path: Path) -> bool:
    (sql,) = rows(db_path, "SELECT sql FROM sqlite_schema WHERE name = 'operations'")[0]
    return "WITHOUT ROWID" in str(sql).upper()


@pytest.fixture
def version_5(db_path: Path) -> tuple[list[tuple[Any, ...]], Record]:
    """A version-5 database holding a completed and a claimed operation."""
    schema_5(db_path)
    assert is_without_rowid(db_path)
    done = Record.for_invocation(
        make_invocation("run-old", sequence=0, request={"order": "A1"}),
        Success('{"shipped":true}'),
    )
    held = Record.for_invocation(
        make_invocation("run-old", sequence=1, request={"order": "B2"}), Success("null")
    )
    values = [
        operation_values(done, status="completed", owner="host:1:abc/1", lease=("lease-a", 4)),
        operation_values(held, status="claimed", owner="host:1:abc/2", lease=(None, None)),
    ]
    insert_operations(db_path, values)
    return values, done


async def test_the_rows_survive_with_every_column(
    db_path: Path, version_5: tuple[list[tuple[Any, ...]], Record]
) -> None:
    values, _ = version_5
    store = zincir.open_store(db_path)
    try:
        assert rows(db_path, "SELECT MAX(version) FROM schema_migrations") == [
            (max(version for version, _, _ in migrations()),)
        ]
        assert (
            rows(db_path, f"SELECT {COLUMNS} FROM operations ORDER BY run_id, step_id, sequence")
            == values
        )
        claimed = await store.get_operation(
            new_operation(make_invocation("run-old", sequence=1, request={"order": "B2"})).key
        )
        assert claimed is not None
        assert (claimed.status, claimed.claim_owner, claimed.attempts) == (
            "claimed",
            "host:1:abc/2",
            1,
        )
    finally:
        await store.close()


async def test_the_table_has_rowids_and_a_unique_identity(
    db_path: Path, version_5: tuple[list[tuple[Any, ...]], Record]
) -> None:
    values, _ = version_5
    zincir.open_store(db_path).close_sync()
    assert not is_without_rowid(db_path)
    rowids = [rowid for (rowid,) in rows(db_path, "SELECT rowid FROM operations ORDER BY rowid")]
    assert len(rowids) == 2 and len(set(rowids)) == 2
    assert rows(
        db_path,
        "SELECT name, \"unique\" FROM pragma_index_list('operations') "
        "WHERE name = 'operations_identity'",
    ) == [("operations_identity", 1)]
    assert [
        column
        for (column,) in rows(db_path, "SELECT name FROM pragma_index_info('operations_identity')")
    ] == ["run_id", "step_id", "sequence"]
    conn = apsw.Connection(str(db_path))
    try:
        duplicate = list(values[0])
        duplicate[4] = "another-handler"
        with pytest.raises(apsw.ConstraintError):
            with conn:
                conn.execute(
                    f"INSERT INTO operations ({COLUMNS}) VALUES ({', '.join('?' * 18)})",
                    tuple(duplicate),
                )
        other = list(values[0])
        other[2] = 2  # another sequence is another identity
        with conn:
            conn.execute(
                f"INSERT INTO operations ({COLUMNS}) VALUES ({', '.join('?' * 18)})",
                tuple(other),
            )
    finally:
        conn.close()
    assert rows(db_path, "SELECT COUNT(*) FROM operations") == [(3,)]


async def test_a_migrated_record_replays_without_its_handler(
    db_path: Path, version_5: tuple[list[tuple[Any, ...]], Record]
) -> None:
    _, done = version_5
    store = zincir.open_store(db_path)
    try:
        runtime = LocalRuntime(store, registry_with(never_called), poll_interval=0.01)
        assert await runtime.execute(done.invocation) == done
        drifted = make_invocation("run-old", sequence=0, request={"order": "Z9"})
        with pytest.raises(InputDrift):
            await runtime.execute(drifted)
        # the claimed identity is held by its (expired-later) owner; a new identity runs
        handler = Calls()
        fresh = make_invocation("run-old", sequence=5)
        record = await LocalRuntime(store, registry_with(handler)).execute(fresh)
        assert handler.count == 1 and record.invocation == fresh
        assert rows(db_path, "SELECT COUNT(*) FROM operations") == [(3,)]
    finally:
        await store.close()


async def test_a_migrated_claim_is_taken_over_once_it_expires(
    db_path: Path, version_5: tuple[list[tuple[Any, ...]], Record]
) -> None:
    """The claimed row keeps its expiry: a runtime whose clock is past it takes it over and
    updates that same row."""
    clock = FakeClock(START + timedelta(hours=1))
    store = zincir.open_store(db_path, clock=clock)
    try:
        handler = Calls()
        invocation = make_invocation("run-old", sequence=1, request={"order": "B2"})
        record = await LocalRuntime(store, registry_with(handler)).execute(invocation)
        assert handler.count == 1
        [(status, attempts, *stored)] = rows(
            db_path,
            f"SELECT status, attempts, {WHOLE_RECORD} FROM operations "
            "WHERE run_id = 'run-old' AND sequence = 1",
        )
        assert (status, attempts, whole_record(*stored)) == (
            "completed",
            2,
            encode_record(record),
        )
    finally:
        await store.close()
