"""ResumeWorker: racing claims, attempts and backoff, timer and message waits, shutdown, CLI."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO, START, FakeClock
from tests.helpers import event_types, select
from zincir import AgentContext, SQLiteStore
from zincir.runs._worker import ResumeWorker
from zincir.workflow import WorkflowContext, send_message

CHILD = REPO / "tests" / "crash" / "workflow_child.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def an_hour_later() -> datetime:
    """A clock on which every lease taken in the last hour has expired."""
    return datetime.now(UTC) + timedelta(hours=1)


def abandon_runs(db: str, prefix: str, count: int) -> None:
    """A real process creates ``count`` runs with 30 s leases and is SIGKILLed."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "abandon", db, prefix, str(count), "30"],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()
    assert line.strip() == f"ready {count}", process.stderr.read()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    process.stderr.close()


async def test_sixteen_workers_claim_each_expired_run_exactly_once(store_target: str) -> None:
    db = store_target
    abandon_runs(db, "lost-", 200)
    store = zincir.open_store(db)
    live = [
        await AgentContext.create(
            store, name="live", run_id=f"live-{i}", lease_ttl=timedelta(hours=2)
        )
        for i in range(5)
    ]
    for i in range(5):
        done = await AgentContext.create(store, name="done", run_id=f"done-{i}")
        await done.complete()
    dispatched: list[tuple[int, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker_thread(number: int) -> None:
        async def handler(ctx: AgentContext) -> None:
            with lock:
                dispatched.append((number, ctx.run_id))
            await asyncio.sleep(0.001)
            await ctx.complete({"worker": number})

        async def shutdown() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.01)

        async def serve() -> None:
            own = zincir.open_store(db, clock=an_hour_later)
            try:
                worker = (
                    ResumeWorker(own, lease_ttl=timedelta(seconds=30))
                    .poll_interval(0.01)
                    .max_concurrency(4)
                )
                await worker.run(handler, shutdown())
            finally:
                await own.close()

        asyncio.run(serve())

    threads = [threading.Thread(target=worker_thread, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done_count = select(
                db,
                "SELECT COUNT(*) FROM agent_runs WHERE id LIKE 'lost-%' AND status = 'completed'",
            )
            if done_count == [(200,)]:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)  # let any (wrong) second claim surface
    finally:
        stop.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 30)

    per_run = Counter(run_id for _, run_id in dispatched)
    assert set(per_run) == {f"lost-{i:04d}" for i in range(200)}  # no live or terminal run
    assert set(per_run.values()) == {1}
    claims = select(
        db, "SELECT run_id, COUNT(*) FROM events WHERE type = 'run_claimed' GROUP BY run_id"
    )
    assert len(claims) == 200 and {n for _, n in claims} == {1}
    assert select(
        db,
        "SELECT DISTINCT status, attempts, lease_token FROM agent_runs WHERE id LIKE 'lost-%'",
    ) == [("completed", 1, 2)]
    for ctx in live:  # never stolen: the owners still write with their first token
        assert ctx.lease_token == 1
        await ctx.record_response("still here", [])
        await ctx.close()
    await store.close()


async def test_claiming_a_thousand_expired_runs_is_fast(store_target: str) -> None:
    abandon_runs(store_target, "bulk-", 1000)
    store = zincir.open_store(store_target, clock=an_hour_later)
    try:
        worker = ResumeWorker(store, lease_ttl=timedelta(seconds=30))
        began = time.perf_counter()
        leases = await worker.claim(1000)
        elapsed = time.perf_counter() - began
        assert len(leases) == 1000 and len({lease.run_id for lease in leases}) == 1000
        assert {lease.token for lease in leases} == {2}
        assert elapsed < 1.0, f"{1000 / elapsed:.0f} claims/s"
        assert await worker.claim(10) == []  # now all live
    finally:
        await store.close()


async def make_idle_run(store: SQLiteStore, run_id: str) -> None:
    await (await AgentContext.create(store, name="idle", run_id=run_id)).close()


async def test_attempts_backoff_and_max_attempts(fake_store: SQLiteStore, clock: FakeClock) -> None:
    await make_idle_run(fake_store, "flaky")
    calls = 0

    async def boom(ctx: AgentContext) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError(f"boom {calls}")

    worker = ResumeWorker(fake_store, lease_ttl=30, max_attempts=3).backoff(10, factor=2)
    assert await worker.run_once(boom) == 1
    run = await fake_store.get_run("flaky")
    assert run is not None
    assert (run["attempts"], run["last_error"], run["lease_owner"], run["status"]) == (
        1,
        "RuntimeError: boom 1",
        None,
        "running",
    )
    assert run["next_attempt_at"] == "2030-01-01T00:00:10.000000Z"
    assert await worker.run_once(boom) == 0  # backing off
    clock.advance(9.9)
    assert await worker.run_once(boom) == 0
    clock.advance(0.1)
    assert await worker.run_once(boom) == 1  # attempt 2, then 20 s of backoff
    clock.advance(19.9)
    assert await worker.run_once(boom) == 0
    # A restarted worker honours the persisted backoff too.
    assert await ResumeWorker(fake_store).run_once(boom) == 0
    clock.advance(0.1)
    assert await worker.run_once(boom) == 1  # attempt 3: the last one
    run = await fake_store.get_run("flaky")
    assert run is not None
    assert (run["status"], run["attempts"], run["last_error"]) == (
        "failed",
        3,
        "RuntimeError: boom 3",
    )
    clock.advance(3600)
    assert await worker.run_once(boom) == 0  # terminal runs are never dispatched
    assert calls == 3
    events = await fake_store.list_events("flaky")
    assert [e.type for e in events] == [
        "state_transition",
        "run_claimed",
        "attempt_failed",
        "run_claimed",
        "attempt_failed",
        "run_claimed",
        "state_transition",
    ]
    assert events[-1].payload == {
        "from": "running",
        "to": "failed",
        "error": "RuntimeError: boom 3",
        "attempts": 3,
    }


async def test_dead_worker_attempts_count_and_fail_the_run(
    fake_store: SQLiteStore, clock: FakeClock
) -> None:
    await make_idle_run(fake_store, "cursed")
    dying = ResumeWorker(fake_store, lease_ttl=5, max_attempts=2).backoff(1)
    assert [lease.token for lease in await dying.claim(5)] == [2]  # then it "dies"
    assert await dying.claim(5) == []  # the lease is live
    clock.advance(5)
    assert [lease.token for lease in await dying.claim(5)] == [3]
    clock.advance(5)
    assert await dying.claim(5) == []  # two attempts used: failed instead of claimed
    run = await fake_store.get_run("cursed")
    assert run is not None
    assert (run["status"], run["attempts"], run["lease_owner"]) == ("failed", 2, None)
    assert "attempt 2 ended without completing" in run["last_error"]


async def test_returning_without_complete_releases_the_lease(
    fake_store: SQLiteStore, clock: FakeClock
) -> None:
    await make_idle_run(fake_store, "idle")
    seen: list[int] = []

    async def peek(ctx: AgentContext) -> None:
        seen.append(ctx.lease_token)
        await ctx.record_response("looked", [])

    worker = ResumeWorker(fake_store).backoff(2)
    assert await worker.run_once(peek) == 1
    run = await fake_store.get_run("idle")
    assert run is not None
    assert (run["status"], run["lease_owner"], run["lease_expires_at"]) == ("running", None, None)
    assert run["next_attempt_at"] == "2030-01-01T00:00:02.000000Z"
    clock.advance(2)
    assert await worker.run_once(peek) == 1
    assert seen == [2, 3]


async def test_timer_waits_never_wake_early_or_twice(
    fake_store: SQLiteStore, clock: FakeClock
) -> None:
    durations = {f"sleeper-{n}": 10 * n for n in range(1, 6)}
    for run_id in durations:
        await (await WorkflowContext.open(fake_store, run_id)).close()
    woke: list[tuple[str, datetime]] = []

    async def handler(ctx: AgentContext) -> None:
        wf = WorkflowContext.from_agent(ctx, suspend_waits=True)
        await wf.step("prepare", lambda: "ready")
        await wf.sleep("nap", durations[ctx.run_id])
        woke.append((ctx.run_id, clock.now))
        await wf.complete()

    workers = [ResumeWorker(fake_store).backoff(0) for _ in range(3)]

    async def tick() -> int:
        return sum(await asyncio.gather(*(w.run_once(handler) for w in workers)))

    assert await tick() == 5  # each run starts and suspends on its timer
    assert await tick() == 0
    dispatches = 0
    for _ in range(70):
        clock.advance(1)
        dispatches += await tick()
    assert dispatches == 5
    assert sorted(woke) == [
        (run_id, START + timedelta(seconds=seconds))
        for run_id, seconds in sorted(durations.items())
    ]
    for run_id in durations:
        run = await fake_store.get_run(run_id)
        assert run is not None and run["status"] == "completed"


async def test_message_and_child_waits_are_claimed_when_satisfied(
    fake_store: SQLiteStore, store_url: str
) -> None:
    await (await WorkflowContext.open(fake_store, "approval")).close()
    await (await WorkflowContext.open(fake_store, "parent")).close()
    log: list[str] = []

    async def handler(ctx: AgentContext) -> None:
        wf = WorkflowContext.from_agent(ctx, suspend_waits=True)
        log.append(ctx.run_id)
        if ctx.run_id == "approval":
            decision = await wf.recv("decision")
            await wf.complete(decision)
        elif ctx.run_id == "parent":
            child = await wf.spawn("helper", run_id="helper")
            outcome = await wf.join(child)
            await wf.complete({"child": outcome.result})
        else:
            await wf.complete(f"{ctx.run_id} done")

    worker = ResumeWorker(fake_store).backoff(0)
    assert await worker.run_once(handler) == 2  # both start, then wait
    assert await worker.run_once(handler) == 1  # only the new pending child
    assert await worker.run_once(handler) == 1  # the parent: its child is terminal
    assert await worker.run_once(handler) == 0  # approval still waits for its message
    await send_message(fake_store, "approval", "decision", "approved")
    assert await worker.run_once(handler) == 1
    assert log == ["approval", "parent", "helper", "parent", "approval"]
    assert select(store_url, "SELECT id, status, result FROM agent_runs ORDER BY id") == [
        ("approval", "completed", '"approved"'),
        ("helper", "completed", '"helper done"'),
        ("parent", "completed", '{"child":"helper done"}'),
    ]
    assert event_types(store_url, "helper")[:2] == ["state_transition", "run_claimed"]


async def test_run_respects_concurrency_and_shutdown(store: SQLiteStore) -> None:
    for i in range(12):
        await make_idle_run(store, f"job-{i:02d}")
    active = 0
    peak = 0
    finished: list[str] = []
    enough = asyncio.Event()

    async def handler(ctx: AgentContext) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        await ctx.complete()
        finished.append(ctx.run_id)
        if len(finished) >= 4:
            enough.set()

    worker = ResumeWorker(store, lease_ttl=5).poll_interval(0.01).max_concurrency(3)
    await asyncio.wait_for(worker.run(handler, enough.wait()), 10)
    assert active == 0  # in-flight handlers finished before run() returned
    assert peak == 3
    assert 4 <= len(finished) <= 8  # the 4th, its batch, and at most one late claim
    leftover = [run for run in await store.list_runs() if run["status"] == "running"]
    assert len(leftover) == 12 - len(finished)
    assert {(run["lease_owner"], run["attempts"]) for run in leftover} == {(None, 0)}


def cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    code = "import sys; from zincir.runs._worker_cli import worker_command; worker_command()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_cli_worker_crash_then_resume_then_sigterm(store_target: str, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(
        "import asyncio\n\n"
        "async def hang(ctx):\n"
        "    print('handling', ctx.run_id, ctx.lease_token, flush=True)\n"
        "    await asyncio.Event().wait()\n\n"
        "async def finish(ctx):\n"
        "    await ctx.complete('finished')\n"
        "    print('finished', ctx.run_id, ctx.lease_token, flush=True)\n"
    )
    db = store_target
    store = zincir.open_store(db)
    asyncio.run(make_idle_run(store, "job"))
    store.close_sync()
    options = ["--db", db, "--lease-ttl", "0.3", "--poll-interval", "0.02"]

    first = cli("handlers:hang", *options, cwd=tmp_path)
    assert first.stdout is not None and first.stderr is not None
    assert first.stdout.readline().split() == ["handling", "job", "2"]
    first.send_signal(signal.SIGKILL)  # the worker process dies mid-handler
    first.wait(timeout=30)
    first.stdout.close()
    first.stderr.close()

    second = cli("handlers:finish", *options, cwd=tmp_path)
    assert second.stdout is not None
    assert second.stdout.readline().split() == ["finished", "job", "3"]
    second.send_signal(signal.SIGTERM)
    _, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert "stopped" in err
    assert select(db, "SELECT status, attempts, result FROM agent_runs") == [
        ("completed", 2, '"finished"')
    ]
    assert event_types(db, "job").count("run_claimed") == 2


def test_cli_rejects_a_bad_target(tmp_path: Path) -> None:
    for target in ("no_colon", "missing_module:fn", "os:not_there"):
        process = cli(target, "--db", str(tmp_path / "x.db"), cwd=tmp_path)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 2, err
        assert "TARGET" in err


async def test_configuration_is_chainable_and_validated(store: SQLiteStore) -> None:
    worker = ResumeWorker(store)
    assert worker.poll_interval(timedelta(milliseconds=50)).max_concurrency(4) is worker
    assert worker.max_attempts(3).backoff(timedelta(seconds=1), factor=3) is worker
    assert [worker.delay(n).total_seconds() for n in (1, 2, 3)] == [1, 3, 9]
    assert worker.backoff(1, maximum=5).delay(10) == timedelta(seconds=5)
    for bad in (
        lambda: worker.poll_interval(0),
        lambda: worker.max_concurrency(0),
        lambda: worker.max_concurrency(True),
        lambda: worker.max_attempts(0),
        lambda: worker.backoff(-1),
        lambda: worker.backoff(1, factor=0.5),
    ):
        with pytest.raises(zincir.InvalidInput):
            bad()
    with pytest.raises(zincir.InvalidLeaseTtl):
        ResumeWorker(store, lease_ttl=0.001)
    with pytest.raises(zincir.InvalidInput):
        await worker.run("not callable", asyncio.sleep(0))  # type: ignore[arg-type]
