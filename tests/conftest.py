"""Shared fixtures: a fresh store (SQLite file, or PostgreSQL schema) per test."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import zincir
from tests.agent.openai_server import ChatServer, chat_server
from tests.helpers import backend_target
from tests.integration.temporal_server import TemporalServer, temporal_server_session
from tests.postgres_server import PostgresError, PostgresServer, schema_name
from zincir.store import Store
from zincir.testing import FakeClock

REPO = Path(__file__).resolve().parents[1]
START = datetime(2030, 1, 1, tzinfo=UTC)


def dunder_all_order(names: list[str]) -> list[str]:
    """``names`` in the order ruff's RUF022 keeps ``__all__``: CONSTANTS, Classes, the rest."""
    return sorted(names, key=lambda name: (not name.isupper(), not name[:1].isupper(), name))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "zincir.db"


BACKENDS = tuple(
    name for name in os.environ.get("ZINCIR_TEST_BACKENDS", "sqlite,postgres").split(",") if name
)
"""The store backends the ``store`` and ``fake_store`` fixtures run each test on (both in
``make test``; ``make test-quick`` sets ``ZINCIR_TEST_BACKENDS=sqlite``)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test on ``store`` or ``fake_store`` runs once per backend, unless it also reads the
    SQLite file itself (``db_path``) or is marked ``sqlite_only``: then it is a test of the
    SQLite backend only."""
    wanted = {"store", "fake_store"} & set(metafunc.fixturenames)
    if wanted and "db_path" not in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        backends = [name for name in BACKENDS if name == "sqlite" or not only_sqlite]
        metafunc.parametrize("backend", backends, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The backend of this test's store: ``sqlite`` unless parametrised."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where this test's store lives: a SQLite file, or a fresh PostgreSQL schema."""
    if backend == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "zincir.db")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = zincir.open_store(store_url)
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def fake_store(store_url: str, clock: FakeClock) -> AsyncIterator[Store]:
    """A store whose clock only moves when the test (or a fake sleep) moves it."""
    opened = zincir.open_store(store_url, clock=clock)
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


@pytest.fixture(params=BACKENDS)
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database on each backend of ``ZINCIR_TEST_BACKENDS``, as the SQLite path or
    PostgreSQL URL a test opens its own stores on (several, or again after a close) or hands
    to a child process. A test asks for this or for ``store``, never both."""
    return backend_target(request, tmp_path)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``temporal`` every test that needs the dev server (`make test-quick` skips them)."""
    for item in items:
        if "temporal_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.temporal)


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """A real Temporal dev server on 127.0.0.1, started when a test first asks and shared by
    the rest of the session (of this xdist worker)."""
    yield from temporal_server_session()


@pytest.fixture(scope="module")
def running_server() -> Iterator[ChatServer]:
    """The scripted OpenAI-compatible server, one a test module."""
    with chat_server() as running:
        yield running


@pytest.fixture
async def server(running_server: ChatServer) -> AsyncIterator[ChatServer]:
    """The module's scripted server, its script and records cleared for this test."""
    running_server.reset()
    yield running_server
    await running_server.close_clients()
