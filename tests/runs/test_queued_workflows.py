"""Workflow runs queued through ``ResumeWorker.enqueue``: ResumeWorker processes start them
within the queue's limits (globally and per key), by priority then age, on each backend."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import lines
from tests.agent.test_queues import intervals, most_at_once
from tests.runs.queued_flow_worker import LOG_ENV, NAME, SLEEP_ENV, SLOTS_ENV, handler
from zincir.store import Store

WORKER = Path(__file__).with_name("queued_flow_worker.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file each queued workflow's step notes its start and end in."""
    path = tmp_path / "work.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    monkeypatch.setenv(SLEEP_ENV, "0.3")
    yield path


async def wait_finished(store: Store, run_ids: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        runs = [await store.get_run(run_id) for run_id in run_ids]
        statuses = [None if run is None else run["status"] for run in runs]
        if all(status == "completed" for status in statuses):
            return
        assert time.monotonic() < deadline, f"runs not finished: {statuses}"
        await asyncio.sleep(0.1)


def start_workers(target: str, stop: Path, count: int) -> list[subprocess.Popen[str]]:
    paths = os.pathsep.join([str(REPO / "src"), str(REPO)])
    children = []
    for _ in range(count):
        child = subprocess.Popen(
            [sys.executable, str(WORKER), target, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": paths, SLOTS_ENV: "1"},
        )
        children.append(child)
        assert child.stdout is not None
        assert child.stdout.readline() == "serving\n", child.stderr and child.stderr.read()
    return children


def finish(stop: Path, children: list[subprocess.Popen[str]]) -> None:
    stop.touch()
    for child in children:
        try:
            _, errors = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise
        assert child.returncode == 0, errors


@pytest.mark.crash
@pytest.mark.parametrize("per_key", [False, True])
async def test_three_worker_processes_never_exceed_the_queue_s_concurrency(
    store_target: str, log: Path, tmp_path: Path, per_key: bool
) -> None:
    queue = (
        zincir.Queue("flows-per-key", concurrency_per_key=1)
        if per_key
        else zincir.Queue("flows", concurrency=2)
    )
    stop = tmp_path / "stop"
    children = start_workers(store_target, stop, 3)  # one slot each: overlap needs processes
    store = zincir.open_store(store_target)
    try:
        starter = zincir.ResumeWorker(store)
        run_ids = [
            await starter.enqueue(
                NAME, {"label": f"run{i}", "key": f"key{i % 2}"}, queue=queue, key=f"key{i % 2}"
            )
            for i in range(10)
        ]
        await wait_finished(store, run_ids)
    finally:
        await store.close()
        finish(stop, children)
    found = intervals(log)
    assert sorted(found) == sorted(f"run{i}" for i in range(10))
    spans = [(start, end) for start, end, _ in found.values()]
    if per_key:
        for key in ("key0", "key1"):
            mine = [(start, end) for start, end, k in found.values() if k == key]
            assert most_at_once(mine) == 1, f"two runs of {key} at once"
        assert most_at_once(spans) == 2  # the two keys did run side by side
    else:
        assert most_at_once(spans) == 2
    pids = {line.split()[3] for line in lines(log)}
    assert len(pids) >= 2, "the runs were served by several processes"


async def test_queued_workflows_start_by_priority_then_age(store_target: str, log: Path) -> None:
    queue = zincir.Queue("one-flow", concurrency=1)
    store = zincir.open_store(store_target)
    try:
        worker = zincir.ResumeWorker(store, names=[NAME]).poll_interval(0.05)
        run_ids = [
            await worker.enqueue(NAME, {"label": label}, queue=queue, priority=priority)
            for label, priority in [("low", 0), ("mid", 1), ("high", 5), ("mid2", 1), ("low2", 0)]
        ]
        stop = asyncio.Event()
        serving = asyncio.ensure_future(worker.run(handler, stop.wait()))
        try:
            await wait_finished(store, run_ids)
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
    finally:
        await store.close()
    starts = [line.split()[1] for line in lines(log) if line.startswith("start")]
    assert starts == ["high", "mid", "mid2", "low", "low2"]
    assert most_at_once([(start, end) for start, end, _ in intervals(log).values()]) == 1


async def test_a_dedupe_id_returns_the_first_queued_workflow(store_target: str) -> None:
    store = zincir.open_store(store_target)
    try:
        worker = zincir.ResumeWorker(store)
        queue = zincir.Queue("dedupe-flows", concurrency=1)
        first = await worker.enqueue(NAME, {"label": "a"}, queue=queue, dedupe_id="order-7")
        again = await worker.enqueue(NAME, {"label": "b"}, queue=queue, dedupe_id="order-7")
        other = await worker.enqueue(
            NAME, {"label": "c"}, queue=zincir.Queue("other-flows"), dedupe_id="order-7"
        )
        assert again == first and other != first
        assert await worker.enqueue(NAME, queue=queue, run_id="mine") == "mine"
        assert await worker.enqueue(NAME, queue=queue, run_id="mine") == "mine"
        with pytest.raises(zincir.RunExists) as raised:
            await worker.enqueue(NAME, queue=zincir.Queue("other-flows"), run_id="mine")
        assert raised.value.run_id == "mine"
        run = await store.get_run(first)
        assert run is not None and run["status"] == "pending" and run["name"] == NAME
        places = await store.queued_runs([first, "mine"])
        assert places[first].waiting and places["mine"].waiting
        for bad in (
            {"priority": 1.5},
            {"key": ""},
            {"dedupe_id": 3},
            {"queue": "q"},
            {"run_id": ""},
            {"name": ""},
        ):
            arguments = {"name": NAME, "queue": queue, **bad}
            with pytest.raises(zincir.InvalidInput):
                await worker.enqueue(**arguments)  # type: ignore[arg-type]
        # a claim admits one run of the queue of concurrency one (the first), and the other
        # queue's run; "mine" waits for the slot
        leases = await worker.claim(5)
        assert sorted(lease.run_id for lease in leases) == sorted([first, other])
        assert await worker.claim(5) == []
        held = (await store.queued_runs(["mine"]))["mine"]
        assert held.waiting and held.held_by is not None and "concurrency" in held.held_by
    finally:
        await store.close()


async def test_a_worker_of_other_names_leaves_queued_runs_waiting(store_target: str) -> None:
    store = zincir.open_store(store_target)
    try:
        queued = await zincir.ResumeWorker(store).enqueue(
            NAME, {"label": "x"}, queue=zincir.Queue("flows")
        )
        assert await zincir.ResumeWorker(store, names=["another"]).claim(5) == []
        assert (await store.queued_runs([queued]))[queued].waiting
    finally:
        await store.close()
