"""Why a live run is not moving, for each way a run can wait, on either backend: in the
run's report, in ``zincir runs list --stuck`` and on the inspector's run page."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from zincir import AgentContext, ResumeWorker, WorkflowContext, WorkflowSuspended
from zincir.cli import main
from zincir.store import Store
from zincir.store._stall import stall_reason
from zincir.store.report import format_run
from zincir.testing import FakeClock


async def _suspended(store: Store, run_id: str, wait: str) -> str | None:
    wf = await WorkflowContext.open(store, run_id, suspend_waits=True)
    child = None
    with pytest.raises(WorkflowSuspended):
        if wait == "timer":
            await wf.sleep("nap", 60)
        elif wait == "message":
            await wf.recv("go")
        else:
            child = await wf.spawn("worker", run_id=f"{run_id}-child")
            await wf.join(child)
    return child


async def test_each_kind_of_wait_says_why(fake_store: Store, clock: FakeClock) -> None:
    store = fake_store

    async def crash(ctx: AgentContext) -> None:
        raise RuntimeError("tool server down")

    failing = await AgentContext.create(store, "agent", run_id="failing")
    await failing.close()
    worker = ResumeWorker(store, lease_ttl=30).backoff(120)
    (lease,) = await worker.claim(20)  # the only run so far
    await worker._dispatch(crash, lease)  # noqa: SLF001 - one attempt, as run() makes it

    await _suspended(store, "sleeper", "timer")
    await _suspended(store, "listener", "message")
    child = await _suspended(store, "joiner", "child")
    deciding = await AgentContext.create(store, "agent", run_id="deciding")
    await store.set_run_wait(
        deciding.lease, "message", "zincir.approval", clock() + timedelta(hours=2)
    )
    await deciding.close()
    live = await AgentContext.create(store, "agent", run_id="live", lease_ttl=60)
    idle = await AgentContext.create(store, "agent", run_id="idle", app_version="v7")
    await idle.close()
    done = await AgentContext.create(store, "agent", run_id="done")
    await done.complete()

    expected = {
        "sleeper": ("timer", "waiting on a timer until"),
        "listener": ("message", "waiting for a message on 'go'"),
        "joiner": ("child", f"waiting for child run {child} to finish"),
        "deciding": ("approval", "waiting for a person to decide a paused call (or until"),
        "live": ("running", "running: held by"),
        "idle": (
            "unclaimed",
            "no live owner: waiting for a ResumeWorker that serves app version v7",
        ),
        "failing": (
            "backoff",
            "backing off after attempt 1 failed (RuntimeError: tool server down)",
        ),
        str(child): ("pending", "not started: waiting for a ResumeWorker"),
    }
    for run_id, (kind, text) in expected.items():
        run = await store.get_run(run_id)
        assert run is not None
        reason = stall_reason(run, clock())
        assert reason is not None, run_id
        assert (reason.kind, reason.text[: len(text)]) == (kind, text), reason
        report = await format_run(store, run_id)
        assert f"waiting   {reason.text}" in report
    timed = stall_reason(await store.get_run("sleeper"), clock())  # type: ignore[arg-type]
    assert timed is not None and timed.next_at is not None and timed.next_at > "2030"
    finished = await store.get_run("done")
    assert finished is not None and stall_reason(finished, clock()) is None
    await live.close()


def test_runs_list_stuck(tmp_path: Path) -> None:
    path = str(tmp_path / "stuck.db")
    clock = FakeClock(datetime(2020, 1, 1, tzinfo=UTC))

    async def setup() -> None:
        store = zincir.open_store(path, clock=clock)
        await _suspended(store, "old-wait", "message")
        old = await AgentContext.create(store, "agent", run_id="old-idle")
        await old.close()
        done = await AgentContext.create(store, "agent", run_id="old-done")
        await done.complete()
        await store.close()
        store = zincir.open_store(path)  # the real clock: progress just now
        fresh = await AgentContext.create(store, "agent", run_id="fresh")
        await fresh.close()
        await store.close()

    asyncio.run(setup())
    runner = CliRunner()
    result = runner.invoke(main, ["runs", "list", "--stuck", "--db", path])
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines()[1:]]
    assert sorted(listed) == ["old-idle", "old-wait"]
    assert "waiting for a message on 'go'" in result.output
    none = runner.invoke(main, ["runs", "list", "--stuck", "--stuck-for", "3650d", "--db", path])
    assert none.exit_code == 0 and none.output.strip() == "no stuck runs"
    bad = runner.invoke(main, ["runs", "list", "--stuck", "--stuck-for", "soon", "--db", path])
    assert bad.exit_code == 2


def test_inspector_shows_why(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from tests.inspector.conftest import ADDRESS, BASE_URL
    from zincir.inspector import create_app

    path = str(tmp_path / "ui.db")

    async def setup() -> None:
        store = zincir.open_store(path)
        await _suspended(store, "waiting-run", "message")
        await store.close()

    asyncio.run(setup())
    client = TestClient(create_app(path, address=ADDRESS), base_url=BASE_URL)
    page = client.get("/runs/waiting-run")
    assert page.status_code == 200
    assert "Why not moving" in page.text
    assert "waiting for a message on &#39;go&#39;" in page.text


def test_a_decided_approval_no_longer_waits_for_a_person(store_target: str) -> None:
    from tests.inspector.conftest import ADDRESS, BASE_URL
    from zincir.agent import APPROVAL_TOPIC, Approve, args_sha256, decide
    from zincir.store import NewApproval

    past = FakeClock(datetime(2020, 1, 1, tzinfo=UTC))
    arguments = {"order_id": "A-17"}

    async def park(run_id: str) -> None:
        store = zincir.open_store(store_target, clock=past)
        try:
            ctx = await AgentContext.create(store, "agent", run_id=run_id)
            approval = NewApproval(
                run_id,
                "c1",
                "refund",
                '{"order_id": "A-17"}',
                args_sha256(arguments),
                3000,
                "approval",
            )
            await store.open_approvals(ctx.lease, [approval])
            await store.set_run_wait(ctx.lease, "message", APPROVAL_TOPIC, None)
            await ctx.close()
        finally:
            await store.close()

    async def approve(run_id: str) -> None:
        store = zincir.open_store(store_target)
        try:
            await decide(store, f"{run_id}/c1", Approve())
        finally:
            await store.close()

    asyncio.run(park("asked"))
    asyncio.run(park("decided"))
    asyncio.run(approve("decided"))
    runner = CliRunner()

    def show(run_id: str) -> str:
        shown = runner.invoke(main, ["runs", "show", run_id, "--db", store_target])
        assert shown.exit_code == 0, shown.output
        return next(line for line in shown.output.splitlines() if line.startswith("waiting"))

    assert "waiting for a person to decide a paused call" in show("asked")
    woken = show("decided")
    assert "a person decided: waiting for a ResumeWorker to resume it" in woken, woken
    assert "waiting for a person" not in woken

    stuck = runner.invoke(main, ["runs", "list", "--stuck", "--db", store_target])
    assert stuck.exit_code == 0, stuck.output
    why = {line.split()[0]: line for line in stuck.output.splitlines()[1:]}
    assert "waiting for a person to decide" in why["asked"]
    assert "a person decided: waiting for a ResumeWorker" in why["decided"], why["decided"]
    assert "waiting for a person" not in why["decided"]

    from starlette.testclient import TestClient

    from zincir.inspector import create_app

    client = TestClient(create_app(store_target, address=ADDRESS), base_url=BASE_URL)
    page = client.get("/runs/decided")
    assert page.status_code == 200 and "a person decided: waiting for a ResumeWorker" in page.text
    listed = client.get("/api/runs").json()["runs"]
    kinds = {run["id"]: run["stall"]["kind"] for run in listed}
    assert kinds == {"asked": "approval", "decided": "woken"}
