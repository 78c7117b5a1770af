"""A durable agent killed with SIGKILL inside a model request, then run again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import zincir
from tests.agent.agent_worker import CLAIM_TTL, LEASE_TTL
from tests.agent.reference import HANDLERS, build, lines
from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, read_store, select
from zincir.agent import AgentRunResult, DurableBinding, serve

WORKER = Path(__file__).with_name("agent_worker.py")

pytestmark = pytest.mark.crash


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the test and its worker process share: a SQLite file or a schema."""
    return backend_target(request, tmp_path)


def start(db: str, log: Path, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), db, str(log), "crash-run", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


async def rerun(db: str, log: Path) -> AgentRunResult:
    """Run the reference agent's crash-run again in this process, once the dead worker's
    lease has lapsed."""
    agent = build(log)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(db)
    try:
        runtime = zincir.LocalRuntime(store, registry, claim_ttl=CLAIM_TTL, poll_interval=0.02)
        binding = DurableBinding(runtime, "crash-run", HANDLERS, lease_ttl=LEASE_TTL)
        deadline = time.monotonic() + 30
        while True:
            try:
                return await agent.run("Use both tools.", durable=binding)
            except zincir.LeaseHeld:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
    finally:
        await store.close()


async def test_killed_inside_the_third_model_request_replays_the_rest(
    crash_target: str, tmp_path: Path
) -> None:
    db, log = crash_target, tmp_path / "log"
    worker = start(db, log, "--hang-at", "2")
    try:
        assert worker.stdout is not None
        line = await asyncio.to_thread(worker.stdout.readline)
        assert line == "inside\n", worker.stderr.read() if worker.stderr else ""
        assert lines(log) == ["model 0", "tool first 1", "model 1", "tool second 2", "model 2"]
        committed = select(
            db, "SELECT step_id, sequence FROM operations WHERE status = 'completed' ORDER BY 1, 2"
        )
        assert ("tool.call", 1000) in committed
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        for stream in (worker.stdout, worker.stderr):
            if stream is not None:
                stream.close()

    result = await rerun(db, log)

    assert result.output == "done: first=1 + second=2"
    assert lines(log) == [
        "model 0",
        "tool first 1",
        "model 1",
        "tool second 2",
        "model 2",
        "model 2",
    ]
    runs = await read_store(db, lambda store: store.list_runs())
    assert [run["id"] for run in runs] == ["crash-run"]  # its log is the whole log
    log_events = await read_store(db, lambda store: store.list_events("crash-run"))
    assert [event.seq for event in log_events] == list(range(1, len(log_events) + 1))
    types = [event.type for event in log_events]
    assert types.count("llm_call") == 3 and types.count("tool_result") == 2
    assert runs[0]["status"] == "completed"


async def test_killed_after_a_response_whose_calls_were_claimed_with_it(
    crash_target: str, tmp_path: Path
) -> None:
    db, log = crash_target, tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env["ZINCIR_CRASH_AT"] = "agent.response_logged:2"  # model 1's record, before its tool
    worker = subprocess.run(
        [sys.executable, str(WORKER), db, str(log), "crash-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert lines(log) == ["model 0", "tool first 1", "model 1"]
    claimed = select(
        db,
        "SELECT step_id, sequence, status, attempts FROM operations "
        "WHERE status = 'claimed' ORDER BY 1, 2",
    )
    assert claimed == [("tool.call", 1000, "claimed", 1)]  # committed with model 1's record

    result = await rerun(db, log)

    assert result.output == "done: first=1 + second=2"
    assert lines(log) == ["model 0", "tool first 1", "model 1", "tool second 2", "model 2"]
    taken_over = select(
        db,
        "SELECT status, attempts FROM operations WHERE step_id = 'tool.call' AND sequence = 1000",
    )
    assert taken_over == [("completed", 2)]  # the dead lease's claim, taken over at once
    log_events = await read_store(db, lambda store: store.list_events("crash-run"))
    assert [event.seq for event in log_events] == list(range(1, len(log_events) + 1))
