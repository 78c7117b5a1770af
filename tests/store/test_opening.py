"""Opening a file that is not a usable zincir database: a typed error and the file untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

import zincir
from zincir import AgentContext, ToolCall


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def _app_db(path: Path, *tables: str) -> None:
    conn = apsw.Connection(str(path))
    for table in tables:
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute(f"INSERT INTO {table} (body) VALUES ('keep me')")
    conn.close()


@pytest.mark.parametrize("tables", [("users", "orders"), ("events",), ("schema_migrations",)])
def test_another_applications_database_is_refused_untouched(
    tmp_path: Path, tables: tuple[str, ...]
) -> None:
    path = tmp_path / "app.db"
    _app_db(path, *tables)
    before, files = _digest(path), _siblings(path)
    with pytest.raises(zincir.NotAZincirDatabase, match="another application"):
        zincir.open_store(path)
    assert _digest(path) == before
    assert _siblings(path) == files  # no -wal or -shm: never switched to WAL
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "delete"
    conn.close()


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before, files = _digest(path), _siblings(path)
    with pytest.raises(zincir.NotAZincirDatabase):
        zincir.open_store(path)
    assert _digest(path) == before and _siblings(path) == files


def test_an_empty_file_becomes_a_zincir_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    zincir.open_store(path).close_sync()
    zincir.open_store(path).close_sync()  # and opens again as zincir's


def test_a_path_that_is_not_text_or_utf8_is_refused(tmp_path: Path) -> None:
    with pytest.raises(zincir.InvalidInput, match="UTF-8"):
        zincir.open_store(str(tmp_path) + "/bad-\udcff.db")
    with pytest.raises(zincir.InvalidInput):
        zincir.open_store(42)  # type: ignore[arg-type]
    with pytest.raises(zincir.InvalidInput):
        zincir.open_store(tmp_path / "x.db", busy_timeout=1e20)
    assert list(tmp_path.iterdir()) == []


async def _long_run(path: Path) -> str:
    store = zincir.open_store(path)
    ctx = await AgentContext.create(store, name="long", run_id="long")
    for n in range(300):
        await ctx.record_response("x" * 500, [ToolCall(f"c{n}", "t", {"n": n})])
    await ctx.close()
    await store.close()
    return ctx.run_id


async def test_damaged_pages_raise_database_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    run_id = await _long_run(path)
    size = path.stat().st_size
    assert size > 40 * 4096
    with path.open("r+b") as handle:  # overwrite pages in the middle of the events table
        for page in range(size // 4096 // 2, size // 4096 // 2 + 20):
            handle.seek(page * 4096)
            handle.write(os.urandom(4096))
    with pytest.raises(zincir.StoreError) as raised:
        store = zincir.open_store(path)
        try:
            await store.list_events(run_id)
            ctx = await AgentContext.recover(store, run_id)
            await ctx.state()
        finally:
            await store.close()
    assert isinstance(raised.value, zincir.DatabaseCorrupt | zincir.NotAZincirDatabase)
    assert "apsw" not in type(raised.value).__module__


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A zincir database the kernel refuses to write, even for root (chattr +i)."""
    path = tmp_path / "frozen.db"
    zincir.open_store(path).close_sync()
    chattr = shutil.which("chattr")
    if (
        chattr is None
        or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0
    ):
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_a_read_only_file_is_refused_before_any_write(immutable: Path) -> None:
    before = _digest(immutable)
    with pytest.raises(zincir.DatabaseReadOnly, match="read-only"):
        zincir.open_store(immutable)
    assert _digest(immutable) == before


async def test_a_lock_held_past_the_busy_timeout_is_store_unavailable(db_path: Path) -> None:
    store = zincir.open_store(db_path, busy_timeout=0.2)
    holder = apsw.Connection(str(db_path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(zincir.StoreUnavailable, match="nothing was written"):
            await AgentContext.create(store, name="blocked", run_id="blocked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await store.get_run("blocked") is None
    ctx = await AgentContext.create(store, name="blocked", run_id="blocked")
    await ctx.close()
    await store.close()


@pytest.mark.parametrize("form", ["plain", "slash", "url"])
def test_a_directory_as_the_database_path_says_so(tmp_path: Path, form: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    given = {"plain": str(folder), "slash": f"{folder}/", "url": f"sqlite:///{folder}"}[form]
    with pytest.raises(zincir.InvalidInput, match="is a directory; pass a database file") as err:
        zincir.open_store(given)
    assert str(folder / "zincir.db") in str(err.value)
    assert list(folder.iterdir()) == []
