"""A database with damaged pages: a typed error and a clear message, never a traceback.

The file is seeded through the real API, closed, and then damaged on disk: page headers
in the middle of the file overwritten (SQLite reports a malformed image) or bytes inside
a stored text replaced by invalid UTF-8. The inspector answers with a page saying the
database is damaged; ``zincir runs show`` prints one line and exits non-zero. Neither
writes the file.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import zincir
from tests.inspector.conftest import client_for, digest, seed
from zincir.cli import main
from zincir.inspector._app import run_url

EVENTS = 300
PAGE_SIZE = 4096


def marker(index: int) -> str:
    return f"marker-{index:04d}-"


async def many_pages(store: zincir.SQLiteStore) -> str:
    ctx = await zincir.AgentContext.create(store, name="long-run")
    for index in range(EVENTS):
        await ctx.record_response(
            marker(index) + "x" * 500, [], "end_turn", usage={"input_tokens": 1}
        )
    await ctx.complete()
    return ctx.run_id


@pytest.fixture
def healthy(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "zincir.db"
    run_id = seed(path, many_pages)
    assert not Path(f"{path}-wal").exists()  # closing checkpointed every page into the file
    assert path.stat().st_size > 40 * PAGE_SIZE
    return path, run_id


def damage_page_headers(path: Path) -> None:
    """Overwrite the header and cell area of the event log's leaf pages in the middle third of
    the file (the schema's pages stay readable wherever new migrations put them)."""
    pages = path.stat().st_size // PAGE_SIZE
    conn = apsw.Connection(str(path))
    try:
        owned = {
            int(number) - 1  # dbstat numbers pages from 1
            for (number,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'events' AND pagetype = 'leaf'"
            )
        }
    finally:
        conn.close()
    chosen = sorted(page for page in owned if pages // 3 <= page < 2 * pages // 3)
    assert len(chosen) >= 5, "the seeded run no longer fills the middle of the file"
    with path.open("r+b") as file:
        for page in chosen:
            file.seek(page * PAGE_SIZE + 8)
            file.write(b"\xff" * 64)
            file.seek(page * PAGE_SIZE + PAGE_SIZE // 2)
            file.write(b"\x00\xff" * 32)


def damage_text(path: Path) -> None:
    """Replace bytes inside one stored payload (event ~150) with invalid UTF-8."""
    data = path.read_bytes()
    at = data.index(marker(EVENTS // 2).encode())
    with path.open("r+b") as file:
        file.seek(at + len(marker(0)) + 40)
        file.write(b"\xff\xfe" * 8)


def show(path: Path, run_id: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["runs", "show", run_id, "--db", str(path)], catch_exceptions=False
    )
    return result.exit_code, result.output


@pytest.mark.parametrize("damage", [damage_page_headers, damage_text])
def test_damaged_pages_are_a_clear_error_in_the_inspector_and_the_cli(
    healthy: tuple[Path, str], damage: object
) -> None:
    path, run_id = healthy
    assert callable(damage)
    damage(path)
    before = digest(path)

    client = client_for(path)
    page = client.get(run_url(run_id))
    assert page.status_code == 500
    assert "The database is damaged" in page.text and "integrity_check" in page.text
    assert "Internal error" not in page.text and "Traceback" not in page.text
    api = client.get(f"/api/runs/{run_id}")
    assert api.status_code == 500
    assert api.json()["error"] == "The database is damaged and cannot be read"

    code, output = show(path, run_id)
    assert code == 1
    assert "damaged" in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1

    assert digest(path) == before  # reading never writes, even a damaged file
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
