"""Durable queues: ``zincir.Queue``, ``Runner.enqueue`` and ``serve`` starting queued runs
within a queue's limits across worker processes, on each backend."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from tests.agent.queue_worker import HANG_ENV, LOG_ENV, SLEEP_ENV, SLOTS_ENV, agent
from tests.agent.reference import lines
from tests.helpers import select
from zincir.agent import Runner
from zincir.cli import main as cli

WORKER = Path(__file__).with_name("queue_worker.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file each queued run's tool notes its start and end in."""
    path = tmp_path / "work.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    monkeypatch.delenv(HANG_ENV, raising=False)
    monkeypatch.setenv(SLEEP_ENV, "0.3")
    yield path


class Workers:
    """Serving processes (``queue_worker.py``) on one database, stopped by a file."""

    def __init__(self, target: str, tmp_path: Path) -> None:
        self.target = target
        self.stop = tmp_path / f"stop-{time.monotonic_ns()}"
        self.children: list[subprocess.Popen[str]] = []

    def start(self, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        paths = os.pathsep.join([str(REPO / "src"), str(REPO)])
        child = subprocess.Popen(
            [sys.executable, str(WORKER), self.target, str(self.stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": paths, **(env or {})},
        )
        self.children.append(child)
        assert child.stdout is not None
        assert child.stdout.readline() == "serving\n", child.stderr and child.stderr.read()
        return child

    def finish(self) -> None:
        self.stop.touch()
        for child in self.children:
            try:
                child.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()


def intervals(log: Path) -> dict[str, tuple[float, float, str]]:
    """Each label's (start, end, key) from the tool's notes (the last start: a run taken
    over starts its tool again)."""
    starts: dict[str, tuple[float, str]] = {}
    found: dict[str, tuple[float, float, str]] = {}
    for line in lines(log):
        what, label, key, _pid, moment = line.split()
        if what == "start":
            starts[label] = (float(moment), key)
        else:
            began, _ = starts[label]
            found[label] = (began, float(moment), key)
    return found


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = running = 0
    for _, step in edges:  # an end sorts before a start at the same time
        running += step
        most = max(most, running)
    return most


async def wait_finished(
    target: str,
    run_ids: list[str],
    timeout: float = 90,
    agents: list[zincir.agent.Agent] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    async with Runner(target, agents or [agent]) as runner:
        while True:
            statuses = [
                (await runner.store.get_run(run_id) or {}).get("status") for run_id in run_ids
            ]
            if all(status == "completed" for status in statuses):
                return
            assert time.monotonic() < deadline, f"runs not finished: {statuses}"
            await asyncio.sleep(0.1)


@pytest.mark.crash
@pytest.mark.parametrize("per_key", [False, True])
async def test_four_workers_never_exceed_the_queue_s_concurrency(
    store_target: str, log: Path, tmp_path: Path, per_key: bool
) -> None:
    queue = (
        zincir.Queue("per-key", concurrency_per_key=1)
        if per_key
        else zincir.Queue("two", concurrency=2)
    )
    workers = Workers(store_target, tmp_path)
    try:
        for _ in range(4):
            workers.start({SLOTS_ENV: "1"})  # two runs at once take two processes
        async with Runner(store_target, [agent]) as runner:
            run_ids = [
                await runner.enqueue(
                    agent, f"run{i} key{i % 3}", queue=queue, key=f"key{i % 3}", run_id=f"r{i}"
                )
                for i in range(12)
            ]
        await wait_finished(store_target, run_ids)
    finally:
        workers.finish()
    found = intervals(log)
    assert sorted(found) == sorted(f"run{i}" for i in range(12))
    spans = [(start, end) for start, end, _ in found.values()]
    if per_key:
        for key in ("key0", "key1", "key2"):
            mine = [(start, end) for start, end, k in found.values() if k == key]
            assert most_at_once(mine) == 1, f"two runs of {key} at once"
        assert most_at_once(spans) >= 2  # different keys did run side by side
    else:
        assert most_at_once(spans) == 2
    pids = {line.split()[3] for line in lines(log)}
    assert len(pids) >= 2, "the runs were served by several processes"


async def test_higher_priority_starts_first(store_target: str, log: Path) -> None:
    queue = zincir.Queue("one", concurrency=1)
    async with Runner(store_target, [agent]) as runner:
        await runner.enqueue(agent, "first k", queue=queue)
        stop = asyncio.Event()
        serving = asyncio.ensure_future(runner.serve(stop.wait(), poll_interval=0.05))
        try:
            deadline = time.monotonic() + 30
            while not any(line.startswith("start first") for line in lines(log)):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            low = await runner.enqueue(agent, "low k", queue=queue, priority=0)
            mid = await runner.enqueue(agent, "mid k", queue=queue, priority=1)
            high = await runner.enqueue(agent, "high k", queue=queue, priority=5)
            await wait_finished(store_target, [low, mid, high])
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
    starts = [line.split()[1] for line in lines(log) if line.startswith("start")]
    assert starts == ["first", "high", "mid", "low"]


async def test_a_dedupe_id_returns_the_first_run(store_target: str, log: Path) -> None:
    queue = zincir.Queue("dedupe", concurrency=1)
    async with Runner(store_target, [agent]) as runner:
        first = await runner.enqueue(agent, "a k", queue=queue, dedupe_id="order-7")
        again = await runner.enqueue(agent, "b k", queue=queue, dedupe_id="order-7")
        other = await runner.enqueue(
            agent, "c k", queue=zincir.Queue("elsewhere"), dedupe_id="order-7"
        )
        assert again == first and other != first
        named = await runner.enqueue(agent, "d k", queue=queue, run_id="mine")
        assert named == "mine"
        assert await runner.enqueue(agent, "d k", queue=queue, run_id="mine") == "mine"
        with pytest.raises(zincir.RunExists) as raised:
            await runner.enqueue(agent, "d k", queue=zincir.Queue("elsewhere"), run_id="mine")
        assert raised.value.run_id == "mine"
        run = await runner.store.get_run(first)
        assert run is not None and run["status"] == "pending"
        # the run is stored as runner.run stores one: resume starts it
        result = await runner.resume(first)
        assert result.output == "done a k"
        place = (await runner.store.queued_runs([first]))[first]
        assert not place.waiting and place.held_by is None  # started outside the queue
        [(started,)] = select(
            store_target, "SELECT queue_started_at FROM agent_runs WHERE id = ?", (first,)
        )
        assert started is not None
        # the newest declaration's settings are stored
        await runner.enqueue(agent, "e k", queue=zincir.Queue("dedupe", concurrency=3))
        depths = {depth.settings.name: depth for depth in await runner.store.queue_depths()}
        assert depths["dedupe"].settings.concurrency == 3
        assert depths["dedupe"].waiting == 2  # "mine" and "e k"
    assert len(select(store_target, "SELECT id FROM agent_runs WHERE queue = 'dedupe'")) == 3


def test_queue_arguments_are_checked() -> None:
    queue = zincir.Queue("q", concurrency=2, rate=(10, timedelta(minutes=1)))
    assert queue.rate == (10, timedelta(minutes=1))
    assert zincir.Queue("q", rate=(5, 2.5)).rate == (5, timedelta(seconds=2.5))
    for bad in (
        {"concurrency": 0},
        {"concurrency_per_key": -1},
        {"rate": 10},
        {"rate": (0, 1)},
        {"rate": (1, 0)},
        {"rate": (1, "1m")},
    ):
        with pytest.raises(zincir.InvalidInput):
            zincir.Queue("q", **bad)  # type: ignore[arg-type]
    with pytest.raises(zincir.InvalidInput):
        zincir.Queue("")


async def test_enqueue_arguments_are_checked(store_target: str) -> None:
    queue = zincir.Queue("q")
    async with Runner(store_target, [agent]) as runner:
        for bad in ({"priority": 1.5}, {"key": ""}, {"dedupe_id": 3}, {"queue": "q"}):
            arguments = {"queue": queue, **bad}
            with pytest.raises(zincir.InvalidInput):
                await runner.enqueue(agent, "x k", **arguments)  # type: ignore[arg-type]


async def test_a_rate_spaces_the_starts(
    store_target: str, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SLEEP_ENV, "0")
    queue = zincir.Queue("rated", rate=(2, timedelta(seconds=1)))
    async with Runner(store_target, [agent]) as runner:
        run_ids = [await runner.enqueue(agent, f"run{i} k", queue=queue) for i in range(5)]
        stop = asyncio.Event()
        serving = asyncio.ensure_future(runner.serve(stop.wait(), poll_interval=0.05))
        try:
            await wait_finished(store_target, run_ids)
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
    starts = sorted(start for start, _, _ in intervals(log).values())
    for i in range(2, len(starts)):
        assert starts[i] - starts[i - 2] >= 0.9, f"more than 2 starts within 1 s: {starts}"


@pytest.mark.crash
async def test_a_killed_worker_s_slot_is_freed_once_its_run_is_taken_over_and_finishes(
    store_target: str, log: Path, tmp_path: Path
) -> None:
    queue = zincir.Queue("single", concurrency=1)
    async with Runner(store_target, [agent]) as runner:
        await runner.enqueue(agent, "hang k", queue=queue, run_id="hang", priority=1)
        await runner.enqueue(agent, "after k", queue=queue, run_id="after")
    workers = Workers(store_target, tmp_path)
    try:
        doomed = workers.start({HANG_ENV: "hang"})
        assert doomed.stdout is not None
        assert doomed.stdout.readline() == "inside\n"
        doomed.send_signal(signal.SIGKILL)
        doomed.communicate(timeout=30)
        # the dead worker's run still holds the slot: "after" waits, and says why
        async with Runner(store_target, [agent]) as runner:
            places = await runner.store.queued_runs(["hang", "after"])
        assert not places["hang"].waiting
        assert places["after"].waiting
        assert places["after"].held_by == "concurrency (1 of 1 running)"
        listed = CliRunner().invoke(
            cli, ["runs", "list", "--db", store_target, "--stuck", "--stuck-for", "0s"]
        )
        assert listed.exit_code == 0, listed.output
        [line] = [line for line in listed.output.splitlines() if line.startswith("after ")]
        assert "waiting in its queue: held by its queue's concurrency (1 of 1 running)" in line
        shown = CliRunner().invoke(cli, ["runs", "list", "--db", store_target])
        assert "single p=1" in shown.output and "single p=0" in shown.output
        depth = CliRunner().invoke(cli, ["queues", "list", "--db", store_target])
        assert depth.output.splitlines()[1].split() == ["single", "1", "-", "-", "1", "1"]
        # a worker on this machine takes the run over at once; "after" starts once it ends
        workers.start()
        await wait_finished(store_target, ["hang", "after"], timeout=60)
    finally:
        workers.finish()
    found = intervals(log)
    assert found["after"][0] >= found["hang"][1]
    starts = [line.split()[1] for line in lines(log) if line.startswith("start")]
    assert starts == ["hang", "hang", "after"]


async def test_a_worker_without_names_admits_queued_runs_of_any_name(store_target: str) -> None:
    """The store's queue path is not the agents' alone: a run of any name stored waiting in a
    queue is admitted by a ResumeWorker that claims through it (here without names)."""
    from zincir.agent._queue import QueueWorker

    queue = zincir.Queue("plain-runs", concurrency=1)
    spans: list[tuple[float, float]] = []

    async def handler(ctx: zincir.AgentContext) -> None:
        began = time.monotonic()
        await asyncio.sleep(0.05)
        spans.append((began, time.monotonic()))
        await ctx.complete({"done": True})

    store = zincir.open_store(store_target)
    try:
        run_ids = [
            (await store.enqueue_run(f"job-{i}", queue.settings(), name="job"))[0] for i in range(4)
        ]
        worker = QueueWorker(store, timedelta(seconds=30)).poll_interval(0.02).max_concurrency(4)
        stop = asyncio.Event()
        working = asyncio.ensure_future(worker.run(handler, stop.wait()))
        try:
            deadline = time.monotonic() + 30
            while not all([await store.run_is_finished(run_id) for run_id in run_ids]):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
        finally:
            stop.set()
            await asyncio.wait_for(working, 30)
    finally:
        await store.close()
    assert len(spans) == 4 and most_at_once(spans) == 1


async def test_a_run_parked_on_a_person_does_not_hold_its_slot(
    store_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.agent.runner_agents import LOG_ENV as REFUNDS_LOG
    from tests.agent.runner_agents import refunds
    from zincir.agent import Approve, decide, pending_approvals

    monkeypatch.setenv(REFUNDS_LOG, str(tmp_path / "refunds.log"))
    queue = zincir.Queue("refunds", concurrency=1)
    async with Runner(store_target, [refunds]) as runner:
        first = await runner.enqueue(refunds, "Refund A-1.", queue=queue)
        second = await runner.enqueue(refunds, "Refund A-2.", queue=queue)
        stop = asyncio.Event()
        serving = asyncio.ensure_future(runner.serve(stop.wait(), poll_interval=0.02))
        try:
            deadline = time.monotonic() + 30
            while len(await pending_approvals(runner.store)) < 2:  # both paused: one slot
                assert time.monotonic() < deadline, "the paused run held the queue's slot"
                await asyncio.sleep(0.05)
            for approval in await pending_approvals(runner.store):
                await decide(runner.store, approval.approval_id, Approve())
            await wait_finished(store_target, [first, second], timeout=30, agents=[refunds])
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
