"""A run's app_version in ``zincir runs list/show`` (and ``--version``) and the inspector."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

import zincir
from zincir import AgentContext
from zincir.cli import main


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def seed(target: str) -> None:
    store = zincir.open_store(target)
    try:
        for run_id, version in (("old", "2026.10.1"), ("new", "2026.11.3"), ("plain", None)):
            ctx = await AgentContext.create(
                store, name="report", run_id=run_id, app_version=version
            )
            await ctx.close()
    finally:
        await store.close()


def test_runs_list_and_show_name_each_run_s_version(store_target: str) -> None:
    asyncio.run(seed(store_target))
    code, listing = invoke("runs", "list", "--db", store_target)
    assert code == 0, listing
    header, *rows = listing.splitlines()
    assert header.split() == ["run", "id", "status", "events", "updated", "version", "name"]
    by_run = {row.split()[0]: row.split() for row in rows}
    assert by_run["old"][4] == "2026.10.1" and by_run["new"][4] == "2026.11.3"
    assert by_run["plain"][4] == "-"
    code, only = invoke("runs", "list", "--version", "2026.10.1", "--db", store_target)
    assert code == 0 and [row.split()[0] for row in only.splitlines()[1:]] == ["old"]
    code, none = invoke("runs", "list", "--version", "0.1", "--db", store_target)
    assert (code, none) == (0, "no runs\n")
    code, shown = invoke("runs", "show", "new", "--db", store_target)
    assert code == 0 and "version   2026.11.3" in shown
    code, shown = invoke("runs", "show", "plain", "--db", store_target)
    assert code == 0 and "version   -" in shown
    code, refused = invoke("runs", "list", "--version", "", "--db", store_target)
    assert code == 1 and "--version" in refused


def test_the_inspector_shows_the_version(tmp_path: Path) -> None:
    from tests.inspector.conftest import client_for

    db = tmp_path / "zincir.db"
    asyncio.run(seed(str(db)))
    client = client_for(db)
    listing = client.get("/").text
    assert "<th>Version</th>" in listing and "<code>2026.10.1</code>" in listing
    page = client.get("/runs/new").text
    assert "App version" in page and "<code>2026.11.3</code>" in page
    assert "unversioned" in client.get("/runs/plain").text
    api = client.get("/api/runs/old").json()
    assert api["run"]["app_version"] == "2026.10.1"
