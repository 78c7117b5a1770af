"""Shared fixtures: a fresh SQLite store in a temporary folder."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import zincir
from tests.postgres_server import PostgresError, PostgresServer, schema_name
from zincir import SQLiteStore
from zincir.testing import FakeClock

REPO = Path(__file__).resolve().parents[1]
START = datetime(2030, 1, 1, tzinfo=UTC)


def dunder_all_order(names: list[str]) -> list[str]:
    """``names`` in the order ruff's RUF022 keeps ``__all__``: CONSTANTS, Classes, the rest."""
    return sorted(names, key=lambda name: (not name.isupper(), not name[:1].isupper(), name))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "zincir.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = zincir.open_store(db_path)
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def fake_store(db_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    """A store whose clock only moves when the test (or a fake sleep) moves it."""
    opened = zincir.open_store(db_path, clock=clock)
    yield opened
    await opened.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (or $ZINCIR_TEST_POSTGRES_URL's), started when a test first
    asks and stopped at the session's end. Without the binaries the tests fail, never skip."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresError as error:
        failure = str(error)  # failed outside the except block: one message, not two
    else:
        failure = ""
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL whose connections work in a fresh schema of their own, dropped after the test."""
    schema = schema_name(request.node.name, secrets.token_hex(4))
    url = postgres_server.new_schema_url(schema)
    yield url
    postgres_server.drop_schema(schema)
