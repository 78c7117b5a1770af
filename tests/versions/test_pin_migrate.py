"""Versioned runs across a deploy: app_version recorded per run, pinned workers, migrations.

The pinning test runs its workers as real ``zincir worker`` processes on a run killed
mid-way; the others drive a ResumeWorker in-process. All run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apsw
import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import select
from zincir import AgentContext, ResumeWorker, VersionMigrations, WorkflowContext
from zincir.store import Store

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
ENV.pop("ZINCIR_APP_VERSION", None)


@pytest.fixture(autouse=True)
def _no_version_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZINCIR_APP_VERSION", raising=False)


# -- processes ------------------------------------------------------------------------------


def start_and_kill(db: str, run_id: str, version: str, steps: int, ledger: Path) -> None:
    """A process starts ``run_id`` on ``version``, runs ``steps`` v1 steps and is SIGKILLed."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / "deploy_flows.py"), db, run_id, version, str(steps)],
        env={**ENV, "ZINCIR_LEDGER": str(ledger)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        line = child.stdout.readline()
        assert line.startswith("holding"), child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()


class WorkerProcess:
    """``zincir worker tests.versions.deploy_flows:by_version --pin-version`` on one version."""

    def __init__(self, db: str, version: str, ledger: Path) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zincir",
                "worker",
                "tests.versions.deploy_flows:by_version",
                "--db",
                db,
                "--pin-version",
                "--poll-interval",
                "0.05",
                "--lease-ttl",
                "2",
            ],
            cwd=REPO,
            env={**ENV, "ZINCIR_APP_VERSION": version, "ZINCIR_LEDGER": str(ledger)},
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit code (0: stopped cleanly) and what it wrote to stderr."""
        self.process.send_signal(signal.SIGTERM)
        _, errors = self.process.communicate(timeout=30)
        return self.process.returncode, errors


def read(db: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """``select``, again while a worker process opening the SQLite file holds it a moment."""
    for _ in range(100):
        try:
            return select(db, sql, params)
        except apsw.BusyError:
            time.sleep(0.05)
    return select(db, sql, params)


def wait_for(db: str, run_id: str, status: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if read(db, "SELECT status FROM agent_runs WHERE id = ?", (run_id,)) == [(status,)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not become {status}")


def effects(ledger: Path) -> Counter[str]:
    return Counter(ledger.read_text().splitlines() if ledger.exists() else [])


def event_types(db: str, run_id: str) -> list[str]:
    return [
        kind
        for (kind,) in read(db, "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    ]


def runs_list(db: str, *options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "zincir", "runs", "list", "--db", db, *options],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


async def queue_run(db: str, run_id: str, version: str) -> None:
    """Create a run on ``version`` and let it go: claimable at once."""
    store = zincir.open_store(db)
    try:
        ctx = await AgentContext.create(store, name="report", run_id=run_id, app_version=version)
        await ctx.close()
    finally:
        await store.close()


async def test_a_pinned_v2_worker_never_claims_a_v1_run_and_a_v1_worker_finishes_it(
    store_target: str, ledger: Path
) -> None:
    db = store_target
    start_and_kill(db, "old", "v1", 1, ledger)  # v1 fetched, then died mid-way
    assert effects(ledger) == Counter({"old fetch -": 1})
    v2 = WorkerProcess(db, "v2", ledger)
    try:
        await queue_run(db, "new", "v2")
        await asyncio.to_thread(wait_for, db, "new", "completed")  # the v2 worker is serving
        await asyncio.sleep(1.0)  # old's 300 ms lease is long expired; many polls went by
        assert read(
            db, "SELECT status, app_version, attempts FROM agent_runs WHERE id = ?", ("old",)
        ) == [("running", "v1", 0)]
        assert "run_claimed" not in event_types(db, "old")
        waiting = runs_list(db, "--version", "v1")  # the run waiting for a v1 worker
        assert "old" in waiting and "new" not in waiting and " v1 " in waiting
    finally:
        code, errors = v2.stop()
    assert code == 0 and "pinned to v2" in errors, errors
    assert effects(ledger) == Counter(
        ["old fetch -"] + [f"new {name} v2" for name in ("fetch", "quote", "notify", "archive")]
    )
    v1 = WorkerProcess(db, "v1", ledger)
    try:
        await asyncio.to_thread(wait_for, db, "old", "completed")
    finally:
        code, errors = v1.stop()
    assert code == 0, errors
    assert effects(ledger) == Counter(
        ["old fetch -"]
        + [f"old {name} v1" for name in ("price", "notify", "archive")]
        + [f"new {name} v2" for name in ("fetch", "quote", "notify", "archive")]
    )
    assert event_types(db, "old").count("run_claimed") == 1
    (result,) = read(db, "SELECT result FROM agent_runs WHERE id = ?", ("old",))
    assert json.loads(result[0]) == ["FETCH", "PRICE", "NOTIFY", "ARCHIVE"]
    listing = runs_list(db)
    assert "version" in listing.splitlines()[0]


# -- in-process ----------------------------------------------------------------------------


async def stopped_after_fetch(store: Store, run_id: str, version: str | None) -> None:
    wf = await WorkflowContext.open(store, run_id, app_version=version)
    await wf.step("fetch", lambda: "FETCH")
    await wf.close()


async def version_of(store: Store, run_id: str) -> str | None:
    run = await store.get_run(run_id)
    assert run is not None
    return run["app_version"]


def versions(store_events: list[zincir.Event]) -> list[object]:
    return [event.payload for event in store_events if event.type == "version_migrated"]


async def test_a_v2_worker_migrates_a_v1_run_when_it_claims_it_before_its_handler(
    store: Store,
) -> None:
    await stopped_after_fetch(store, "old", "v1")
    seen: list[tuple[str, object]] = []
    migrations = VersionMigrations()

    @migrations.register("v1", "v2")
    async def to_v2(ctx: AgentContext) -> None:
        run = await ctx.store.get_run(ctx.run_id)
        assert run is not None
        seen.append(("migration", run["app_version"]))

    async def handler(ctx: AgentContext) -> None:
        run = await ctx.store.get_run(ctx.run_id)
        assert run is not None
        seen.append(("handler", run["app_version"]))
        wf = WorkflowContext.from_agent(ctx)
        await wf.complete([await wf.step("fetch", lambda: "AGAIN")])

    worker = ResumeWorker(store, app_version="v2").pin_version().migrate_with(migrations)
    assert worker.served_versions() == ["v2", "v1"]
    assert await worker.run_once(handler) == 1
    assert seen == [("migration", "v1"), ("handler", "v2")]
    run = await store.get_run("old")
    assert run is not None and (run["status"], run["app_version"]) == ("completed", "v2")
    assert run["result"] == '["FETCH"]'  # the recorded step replayed after the migration
    events = await store.list_events("old")
    kinds = [event.type for event in events]
    assert kinds.index("run_claimed") < kinds.index("version_migrated") < len(kinds) - 1
    assert versions(events) == [{"from": "v1", "to": "v2"}]


async def test_a_chain_of_migrations_moves_a_run_step_by_step(store: Store) -> None:
    await stopped_after_fetch(store, "old", "v1")
    ran: list[str] = []
    migrations = VersionMigrations()
    migrations.register("v2", "v3", lambda ctx: ran.append("v2->v3"))
    migrations.register("v1", "v2", lambda ctx: ran.append("v1->v2"))

    async def handler(ctx: AgentContext) -> None:
        await ctx.complete()

    worker = ResumeWorker(store, app_version="v3").migrate_with(migrations)  # unpinned
    assert worker.served_versions() is None
    assert await worker.run_once(handler) == 1
    assert ran == ["v1->v2", "v2->v3"]
    assert versions(await store.list_events("old")) == [
        {"from": "v1", "to": "v2"},
        {"from": "v2", "to": "v3"},
    ]


async def test_a_pinned_worker_leaves_other_versions_and_unversioned_runs(store: Store) -> None:
    for run_id, version in (("v0-run", "v0"), ("plain", None), ("mine", "v2")):
        await stopped_after_fetch(store, run_id, version)
    done: list[str] = []

    async def handler(ctx: AgentContext) -> None:
        done.append(ctx.run_id)
        await ctx.complete()

    pinned = ResumeWorker(store, app_version="v2").pin_version()
    assert await pinned.migrate_with(VersionMigrations()).run_once(handler) == 1
    assert done == ["mine"]
    assert await pinned.run_once(handler) == 0
    unpinned = ResumeWorker(store, app_version="v2")
    assert await unpinned.run_once(handler) == 2  # every version, and unversioned runs
    assert sorted(done) == ["mine", "plain", "v0-run"]


async def test_a_failing_migration_is_an_attempt_failed_and_leaves_the_version(
    store: Store,
) -> None:
    await stopped_after_fetch(store, "old", "v1")
    migrations = VersionMigrations()

    @migrations.register("v1", "v2")
    def broken(ctx: AgentContext) -> None:
        raise RuntimeError("no currency column")

    handled: list[str] = []

    async def handler(ctx: AgentContext) -> None:
        handled.append(ctx.run_id)

    worker = ResumeWorker(store, app_version="v2").pin_version().migrate_with(migrations)
    assert await worker.run_once(handler) == 1
    assert handled == []
    run = await store.get_run("old")
    assert run is not None and run["app_version"] == "v1"
    assert run["last_error"] == "RuntimeError: no currency column"
    assert [e.type for e in await store.list_events("old")][-1] == "attempt_failed"


async def test_set_app_version_is_fenced_with_its_event(store: Store) -> None:
    first = await AgentContext.create(store, name="r", run_id="r", app_version="v1")
    second = await AgentContext.force_recover(store, "r")
    before = await store.list_events("r")
    with pytest.raises(zincir.FencedOut):
        await store.set_app_version(first.lease, "v2")
    run = await store.get_run("r")
    assert run is not None and run["app_version"] == "v1"
    assert await store.list_events("r") == before  # nothing of the fenced write is stored
    await store.set_app_version(second.lease, "v2")
    await store.set_app_version(second.lease, "v2")  # the version it has: no second event
    events = await store.list_events("r")
    assert versions(events) == [{"from": "v1", "to": "v2"}]
    run = await store.get_run("r")
    assert run is not None and run["app_version"] == "v2"
    await second.complete()
    with pytest.raises(zincir.RunTerminal):
        await store.set_app_version(second.lease, "v3")
    await first.close()


async def test_app_version_defaults_to_the_environment_and_children_inherit_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = await AgentContext.create(store, name="plain")
    monkeypatch.setenv("ZINCIR_APP_VERSION", "2026.11.3")
    from_env = await AgentContext.create(store, name="env")
    explicit = await AgentContext.create(store, name="explicit", app_version="v7")
    wf = WorkflowContext.from_agent(explicit)
    monkeypatch.delenv("ZINCIR_APP_VERSION")
    child_id = await wf.spawn("child", {})
    opened = await WorkflowContext.open(store, "wf", app_version="v8")
    await opened.close()
    reopened = await WorkflowContext.open(store, "wf", app_version="v9")  # keeps its own
    assert {
        run_id: await version_of(store, run_id)
        for run_id in (plain.run_id, from_env.run_id, explicit.run_id, child_id, "wf")
    } == {
        plain.run_id: None,
        from_env.run_id: "2026.11.3",
        explicit.run_id: "v7",
        child_id: "v7",
        "wf": "v8",
    }
    for ctx in (plain, from_env, explicit):
        await ctx.close()
    await reopened.close()


async def test_a_version_is_an_id(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(zincir.InvalidInput, match="app_version"):
        await AgentContext.create(store, name="r", app_version="")
    monkeypatch.setenv("ZINCIR_APP_VERSION", "bad\nversion")
    with pytest.raises(zincir.InvalidInput, match="ZINCIR_APP_VERSION"):
        await AgentContext.create(store, name="r")
    with pytest.raises(zincir.InvalidInput, match="ZINCIR_APP_VERSION"):
        ResumeWorker(store)
    assert await store.list_runs() == []


def test_a_pinned_worker_needs_a_version(tmp_path: Path) -> None:
    store = zincir.open_store(str(tmp_path / "z.db"))
    try:
        with pytest.raises(zincir.InvalidInput, match="pin_version"):
            ResumeWorker(store).pin_version()
        with pytest.raises(zincir.InvalidInput, match="migrate_with"):
            ResumeWorker(store).migrate_with(VersionMigrations())
        assert ResumeWorker(store).pin_version(False).served_versions() is None
    finally:
        store.close_sync()


def test_migrations_form_chains_one_step_out_of_each_version() -> None:
    migrations = VersionMigrations()
    migrations.register("v1", "v2", lambda ctx: None)
    migrations.register("v2", "v3", lambda ctx: None)
    assert migrations.chain("v1", "v3") == [("v1", "v2"), ("v2", "v3")]
    assert migrations.chain("v3", "v3") == []
    assert migrations.chain("v3", "v1") is None and migrations.chain(None, "v3") is None
    assert migrations.sources("v3") == ["v1", "v2"]
    for bad in (("v1", "v9"), ("v3", "v1"), ("v4", "v4"), ("", "v2")):
        with pytest.raises(zincir.InvalidInput):
            migrations.register(*bad, lambda ctx: None)
    with pytest.raises(zincir.InvalidInput, match="callable"):
        migrations.register("v5", "v6", "not a function")  # type: ignore[arg-type]
