"""Inspector fixtures: databases seeded through the real API, and an HTTP client for them."""

from __future__ import annotations

import asyncio
import hashlib
import warnings
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

pytest.importorskip("starlette", reason='the inspector needs the "ui" extra')
pytest.importorskip("jinja2", reason='the inspector needs the "ui" extra')
pytest.importorskip("uvicorn", reason='the inspector needs the "ui" extra')

with warnings.catch_warnings():
    # starlette 1.x prefers httpx2 for its TestClient and warns once, at import, with httpx
    warnings.filterwarnings("ignore", message="Using `httpx` with", category=UserWarning)
    from starlette.testclient import TestClient  # noqa: E402

import zincir  # noqa: E402
from tests.inspector.seed import Seeded, seed_agent_runs, seed_big_run  # noqa: E402
from zincir import SQLiteStore  # noqa: E402
from zincir.inspector import create_app  # noqa: E402

ADDRESS = "127.0.0.1:8787"
BASE_URL = f"http://{ADDRESS}"
BIG_RUN_EVENTS = 100_000

T = TypeVar("T")
Clock = Callable[[], datetime]


def seed(path: Path, fill: Callable[[SQLiteStore], Awaitable[T]], clock: Clock | None = None) -> T:
    """Open (and migrate) a store at ``path``, run ``fill`` on it, close it."""

    async def main() -> T:
        store = zincir.open_store(path, synchronous="normal", clock=clock)
        try:
            return await fill(store)
        finally:
            await store.close()

    return asyncio.run(main())


def client_for(path: Path) -> TestClient:
    """A TestClient whose Host header matches the default bound address."""
    return TestClient(create_app(path, address=ADDRESS), base_url=BASE_URL)


def digest(path: Path) -> str | None:
    """sha256 of a file, or None when it does not exist."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Seeded]:
    path = tmp_path_factory.mktemp("inspector") / "zincir.db"
    return path, seed(path, seed_agent_runs)


@pytest.fixture(scope="module")
def client(seeded: tuple[Path, Seeded]) -> TestClient:
    return client_for(seeded[0])


@pytest.fixture(scope="session")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database holding one run of 100,000 events, seeded through record_response."""
    path = tmp_path_factory.mktemp("big") / "zincir.db"
    return path, seed(path, lambda store: seed_big_run(store, BIG_RUN_EVENTS))
