"""Shared fixtures: a fresh SQLite store in a temporary folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import zincir
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
