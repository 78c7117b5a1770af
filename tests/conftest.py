"""Shared fixtures: a fresh SQLite store in a temporary folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import zincir
from zincir import SQLiteStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "zincir.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = zincir.open_store(db_path)
    yield opened
    await opened.close()
