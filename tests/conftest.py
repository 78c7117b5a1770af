"""Shared fixtures: a fresh SQLite store in a temporary folder."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import zincir
from zincir import SQLiteStore

REPO = Path(__file__).resolve().parents[1]
START = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """The store's clock and a workflow's sleeper: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = START
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)


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
    return FakeClock()


@pytest.fixture
async def fake_store(db_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    """A store whose clock only moves when the test (or a fake sleep) moves it."""
    opened = zincir.open_store(db_path, clock=clock)
    yield opened
    await opened.close()
