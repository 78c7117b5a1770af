"""``zincir check-compat``: v1 runs killed mid-way, checked against v2 code before a deploy.

It names exactly the runs the new code diverges on, exits non-zero when there is one, runs
no step (the ledger of effects does not grow) and changes nothing stored (rows, schema and,
on SQLite, the file's bytes)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import is_postgres, select
from tests.versions.test_pin_migrate import ENV, start_and_kill
from zincir import AgentContext, WorkflowContext
from zincir.runs._compat import check_compat

LINE = re.compile(r"^(\S+)\s+(compatible|divergent|error)\s+version (\S+)\s+(.*)$")


@pytest.fixture(autouse=True)
def _no_version_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZINCIR_APP_VERSION", raising=False)


def stored(db: str) -> tuple[Any, ...]:
    """Everything the database holds: its schema, every row of every table, and for a SQLite
    file the bytes of the file and of its WAL."""
    if is_postgres(db):
        schema = select(
            db,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY 1, 2",
        )
        tables = sorted({table for table, _, _ in schema})
        files: list[bytes] = []
    else:
        schema = select(db, "SELECT type, name, sql FROM sqlite_schema ORDER BY 1, 2")
        tables = [name for kind, name, _ in schema if kind == "table"]
        files = [Path(path).read_bytes() for path in (db, db + "-wal") if Path(path).exists()]
    rows = {table: sorted(map(repr, select(db, f"SELECT * FROM {table}"))) for table in tables}
    return schema, rows, files


def check(db: str, handler: str, ledger: Path) -> tuple[int, dict[str, tuple[str, str]], str]:
    """``zincir check-compat tests.versions.deploy_flows:HANDLER``: its exit code, each
    run's (verdict, detail) and its whole output."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zincir",
            "check-compat",
            f"tests.versions.deploy_flows:{handler}",
            "--db",
            db,
        ],
        cwd=REPO,
        env={**ENV, "ZINCIR_LEDGER": str(ledger)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    verdicts = {
        found[1]: (found[2], found[4])
        for line in done.stdout.splitlines()
        if (found := LINE.match(line))
    }
    return done.returncode, verdicts, done.stdout + done.stderr


async def finished_run(db: str) -> None:
    store = zincir.open_store(db)
    try:
        wf = await WorkflowContext.open(store, "done", app_version="v1")
        for name in ("fetch", "price", "notify", "archive"):
            await wf.step(name, lambda name=name: name.upper())
        await wf.complete()
    finally:
        await store.close()


@pytest.fixture
async def deployed(store_target: str, tmp_path: Path) -> tuple[str, Path]:
    """v1 runs killed after 2 (``a``), none (``b``) and all 4 (``c``) of their steps, and a
    completed run; the ledger of the effects they ran."""
    ledger = tmp_path / "ledger.txt"
    for run_id, steps in (("a", 2), ("b", 0), ("c", 4)):
        await asyncio.to_thread(start_and_kill, store_target, run_id, "v1", steps, ledger)
    await finished_run(store_target)
    return store_target, ledger


async def test_check_compat_names_exactly_the_divergent_runs_and_changes_nothing(
    deployed: tuple[str, Path],
) -> None:
    db, ledger = deployed
    before, effects = stored(db), ledger.read_text()

    code, verdicts, output = await asyncio.to_thread(check, db, "rename", ledger)
    assert code == 1, output
    assert set(verdicts) == {"a", "b", "c"}  # the completed run is not checked
    assert verdicts["a"] == (
        "divergent",
        "replayed 1/2  at #1: the run recorded step 'price', the code asks for step 'quote'",
    )
    assert verdicts["b"] == ("compatible", "replayed 0/0  stops at new work: step 'fetch'")
    assert verdicts["c"][0] == "divergent" and "step 'quote'" in verdicts["c"][1]
    assert "3 unfinished run(s): 1 compatible, 2 divergent, 0 error" in output

    code, verdicts, output = await asyncio.to_thread(check, db, "reorder", ledger)
    assert code == 0, output
    assert {run: verdict for run, (verdict, _) in verdicts.items()} == dict.fromkeys(
        "abc", "compatible"
    )
    assert verdicts["c"][1] == (
        "replayed 4/4  stops at a write the log does not hold: completes the run"
    )
    assert "never replayed" not in output

    code, verdicts, output = await asyncio.to_thread(check, db, "remove", ledger)
    assert code == 1, output
    assert verdicts["a"][0] == "divergent" and "asks for step 'notify'" in verdicts["a"][1]
    assert verdicts["b"][0] == "compatible" and verdicts["c"][0] == "compatible"
    assert re.search(r"^\s+recorded, never replayed: step 'price'$", output, re.M)

    code, verdicts, output = await asyncio.to_thread(check, db, "v1", ledger)
    assert code == 0 and len(verdicts) == 3, output

    assert ledger.read_text() == effects  # no step ran
    assert stored(db) == before  # nothing was written


async def test_check_compat_as_a_function_with_a_gather_and_an_erroring_handler(
    store: zincir.store.Store, store_url: str
) -> None:
    wf = await WorkflowContext.open(store, "g", app_version="v1")
    await asyncio.gather(wf.step("left", lambda: 1), wf.step("right", lambda: 2))
    await wf.close()
    ctx = await AgentContext.create(store, name="plain", run_id="p")
    await ctx.close()

    async def swapped(ctx: AgentContext) -> None:  # the same two steps, asked in another order
        flow = WorkflowContext.from_agent(ctx)
        await asyncio.gather(flow.step("right", lambda: 0), flow.step("left", lambda: 0))
        await flow.step("next", lambda: 3)

    reports = {report.run_id: report for report in await check_compat(store_url, swapped)}
    assert reports["g"].verdict == "compatible" and reports["g"].replayed == 2
    assert reports["g"].detail == "stops at new work: step 'next'"
    assert reports["g"].app_version == "v1" and reports["p"].app_version is None

    async def broken(ctx: AgentContext) -> None:
        raise KeyError("missing configuration")

    only = await check_compat(store_url, broken, run_ids=["g"])
    assert [(r.run_id, r.verdict, r.detail) for r in only] == [
        ("g", "error", "KeyError: 'missing configuration'")
    ]
    with pytest.raises(zincir.RunNotFound, match="nope"):
        await check_compat(store_url, broken, run_ids=["g", "nope"])
    assert [e.type for e in await store.list_events("g")].count("run_claimed") == 0


def test_check_compat_on_a_missing_database_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    done = subprocess.run(
        [sys.executable, "-m", "zincir", "check-compat", "tests.versions.deploy_flows:v1"]
        + ["--db", str(db)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and "no database" in done.stderr
    assert not db.exists() and os.listdir(tmp_path) == []


async def test_check_compat_on_an_agent_run_killed_between_its_tools(
    store_target: str, tmp_path: Path
) -> None:
    """The two-tool agent of agent_versions.py, killed after its first tool ran: the same
    agent is compatible, one whose operations moved diverges, one given another tool drifts
    at its first model request; no tool runs."""
    db, ledger = store_target, tmp_path / "ledger.txt"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).parent / "agent_versions.py"),
        db,
        "agent-1",
        "v1",
        str(ledger),
        "hold",
        env=ENV,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    assert (await child.stdout.readline()).startswith(b"holding")
    child.kill()
    await child.wait()
    before, effects = stored(db), ledger.read_text()
    assert effects == "tool first\n"

    code, verdicts, output = await asyncio.to_thread(check, db, "agent_v1", ledger)
    assert code == 0, output
    assert verdicts["agent-1"] == (
        "compatible",
        "replayed 2/2  stops at new work: operation model.request #1",
    )
    code, verdicts, output = await asyncio.to_thread(check, db, "agent_namespace", ledger)
    assert code == 1, output
    assert verdicts["agent-1"][0] == "divergent"
    assert "recorded operation model.request #0" in verdicts["agent-1"][1]
    assert "asks for operation support.model.request #0" in verdicts["agent-1"][1]
    code, verdicts, output = await asyncio.to_thread(check, db, "agent_add_tool", ledger)
    assert code == 1, output
    assert verdicts["agent-1"][0] == "divergent" and "input drift" in verdicts["agent-1"][1]

    assert ledger.read_text() == effects
    assert stored(db) == before
