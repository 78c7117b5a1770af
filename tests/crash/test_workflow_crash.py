"""Workflows across real process kills: steps replay, sleeps resume, messages stay once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, read_store, select
from zincir.workflow import WorkflowContext

pytestmark = pytest.mark.crash

CHILD = REPO / "tests" / "crash" / "workflow_child.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the test and its child processes share: a SQLite file or a schema."""
    return backend_target(request, tmp_path)


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def until(process: subprocess.Popen[str], prefix: str) -> str:
    """Read the child's reports until one starts with ``prefix``; return its rest."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    assert process.stderr is not None
    raise AssertionError(f"the child exited before {prefix!r}: {process.stderr.read()}")


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    for stream in (process.stdout, process.stderr):
        assert stream is not None
        stream.close()


def finish(*args: str) -> list[str]:
    """Run the child to completion; return its reports."""
    done = subprocess.run(
        [sys.executable, str(CHILD), *args],
        env=ENV,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def executions(side_file: Path) -> Counter[str]:
    return Counter(side_file.read_text().split())


@pytest.mark.parametrize("ahead", [(), ("ahead",)], ids=["claimed", "claimed-ahead"])
async def test_step_killed_in_flight_blocks_until_recover(
    crash_target: str, tmp_path: Path, ahead: tuple[str, ...]
) -> None:
    """Also with each step claimed in the previous step's result transaction (next=)."""
    db, side = crash_target, tmp_path / "side.txt"
    child = start("steps", db, "run", str(side), "in:3", *ahead)
    assert until(child, "blocked in") == "s3"
    kill(child)
    assert executions(side) == Counter(s1=1, s2=1, s3=1)
    assert select(db, "SELECT name, status FROM steps ORDER BY name") == [
        ("s1", "completed"),
        ("s2", "completed"),
        ("s3", "running"),
    ]

    # A restarted process replays s1 and s2 and is refused s3 (its claim is unfinished).
    assert finish("steps", db, "run", str(side), "resume", *ahead) == ["in progress s3"]
    assert executions(side) == Counter(s1=1, s2=1, s3=1)
    # After recover(), s3 runs again (at least once) and the rest once.
    reports = finish("steps", db, "run", str(side), "recover", *ahead)
    assert reports[0] == 'recovered ["s3"]'
    assert reports[1] == 'completed ["S1", "S2", "S3", "S4", "S5"]'
    assert executions(side) == Counter(s1=1, s2=1, s3=2, s4=1, s5=1)
    log = await read_store(db, lambda store: store.list_events("run"))
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert [event.type for event in log].count("step_completed") == 5
    runs = await read_store(db, lambda store: store.list_runs())
    assert [(run["status"], run["lease_owner"]) for run in runs] == [("completed", None)]


def test_step_killed_between_steps_replays_without_recover(
    crash_target: str, tmp_path: Path
) -> None:
    db, side = crash_target, tmp_path / "side.txt"
    child = start("steps", db, "run", str(side), "after:2")
    assert until(child, "after") == "s2"
    kill(child)
    reports = finish("steps", db, "run", str(side), "resume")
    assert reports == ['completed ["S1", "S2", "S3", "S4", "S5"]']
    assert executions(side) == Counter(s1=1, s2=1, s3=1, s4=1, s5=1)
    tokens = select(db, "SELECT claim_token FROM steps ORDER BY name")
    assert tokens == [(1,), (1,), (2,), (2,), (2,)]  # who ran each body


async def test_killed_between_claimed_ahead_steps_the_next_blocks_until_recover(
    crash_target: str, tmp_path: Path
) -> None:
    db, side = crash_target, tmp_path / "side.txt"
    child = start("steps", db, "run", str(side), "after:2", "ahead")
    assert until(child, "after") == "s2"
    kill(child)
    # s3 is claimed (with s2's result) though its body never started: zincir cannot tell
    # that from a crash inside it, so it keeps the step from running twice.
    assert select(db, "SELECT name, status, claim_token FROM steps ORDER BY name") == [
        ("s1", "completed", 1),
        ("s2", "completed", 1),
        ("s3", "running", 1),
    ]
    assert finish("steps", db, "run", str(side), "resume", "ahead") == ["in progress s3"]
    reports = finish("steps", db, "run", str(side), "recover", "ahead")
    assert reports == ['recovered ["s3"]', 'completed ["S1", "S2", "S3", "S4", "S5"]']
    assert executions(side) == Counter(s1=1, s2=1, s3=1, s4=1, s5=1)  # each body once
    runs = await read_store(db, lambda store: store.list_runs())
    assert [(run["status"], run["lease_owner"]) for run in runs] == [("completed", None)]


async def test_sleep_killed_midway_waits_only_the_remainder(crash_target: str) -> None:
    db = crash_target
    child = start("sleep", db, "run", "1.5")
    assert float(until(child, "sleeping")) == pytest.approx(1.5, abs=0.05)
    kill(child)
    timer = await read_store(db, lambda store: store.get_timer("run", "nap"))
    assert timer is not None and not timer.completed
    assert select(db, "SELECT COUNT(*) FROM timers") == [(1,)]  # the only timer
    requested: list[float] = []

    async def sleeper(seconds: float) -> None:
        requested.append(seconds)
        await asyncio.sleep(seconds)

    store = zincir.open_store(db)
    try:
        await asyncio.sleep(0.35)  # the dead owner's 300 ms lease expires
        async with await WorkflowContext.open(store, "run", sleeper=sleeper) as wf:
            await wf.sleep("nap", timedelta(hours=1))  # the stored wake time wins
            assert store.clock() >= timer.wake_at
        fired = await store.get_timer("run", "nap")
    finally:
        await store.close()
    assert 0 < sum(requested) < 1.2
    assert fired is not None and (fired.wake_at, fired.completed) == (timer.wake_at, True)
    assert select(db, "SELECT COUNT(*) FROM timers") == [(1,)]


async def test_messages_once_across_sender_and_receiver_kills(crash_target: str) -> None:
    db = crash_target
    store = zincir.open_store(db)
    try:
        await (await WorkflowContext.open(store, "inbox")).close()
        await (await WorkflowContext.open(store, "outbox")).close()

        sender = start("send", db, "outbox", "inbox", "block")
        first_ids = json.loads(until(sender, "sent"))
        kill(sender)
        replayed = finish("send", db, "outbox", "inbox", "exit")
        assert replayed == [f"sent {json.dumps(first_ids)}"]  # the replayed sends found them
        assert select(db, "SELECT COUNT(*) FROM messages") == [(2,)]

        receiver = start("recv", db, "inbox", "block")
        received = json.loads(until(receiver, "received"))
        assert received == [first_ids[0], {"n": 1}]
        kill(receiver)
        assert finish("recv", db, "inbox", "exit") == [f"received {json.dumps(received)}"]

        await asyncio.sleep(0.35)
        async with await WorkflowContext.open(store, "inbox", poll_interval=0.01) as inbox:
            assert await inbox.recv("job") == {"n": 1}  # the replayed first receive
            assert await inbox.recv("job") == {"n": 2}
            assert await inbox.recv("job", timeout=0.05) is None
        assert select(db, "SELECT id, received_by FROM messages ORDER BY id") == [
            (first_ids[0], "job#1"),
            (first_ids[1], "job#2"),
        ]
    finally:
        await store.close()
