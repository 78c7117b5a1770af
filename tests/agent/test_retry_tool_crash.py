"""A process killed with SIGKILL while a tool's ``RetryTool`` delay is waited, then run
again: the wait is a durable ``retry.delay`` operation, so the restarted run waits the same
delay (its input identical), runs the tool once more and asks no finished model request
again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reference import lines
from tests.agent.retry_tool_worker import HANDLERS, LEASE_TTL, PROMPT, RUN_ID, build
from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, select
from zincir.agent import DurableBinding, serve

WORKER = Path(__file__).with_name("retry_tool_worker.py")

pytestmark = pytest.mark.crash


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_target(request, tmp_path)


async def test_killed_during_a_tools_retry_wait(crash_target: str, tmp_path: Path) -> None:
    db, log = crash_target, tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), db, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert worker.stdout is not None
        line = await asyncio.to_thread(worker.stdout.readline)
        assert line.startswith("waiting "), worker.stderr.read() if worker.stderr else ""
        waited_before = line.removeprefix("waiting ").strip()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=30)
    assert lines(log) == ["model 0", "tool Oslo"]

    timers: list[str] = []

    async def timer(invocation: zincir.Invocation, request: Any) -> Any:
        timers.append(invocation.input_json)
        return {"slept_seconds": 0}

    agent = build(log)
    registry = zincir.HandlerRegistry()
    registry.register(zincir.OperationKind.RETRY_DELAY, "rt-timer", timer)
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(db)
    try:
        runtime = zincir.LocalRuntime(store, registry, poll_interval=0.02)
        binding = DurableBinding(runtime, RUN_ID, HANDLERS, lease_ttl=LEASE_TTL)
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await agent.run(PROMPT, durable=binding)
                break
            except zincir.LeaseHeld:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
    finally:
        await store.close()

    assert result.output == "Oslo: sunny in Oslo"
    assert timers == [waited_before]  # the same wait, computed again identically
    # The tool ran once more; model request 0 was not asked again.
    assert lines(log) == ["model 0", "tool Oslo", "tool Oslo", "model 1"]
    stride = 10**12
    assert select(
        db,
        "SELECT step_id, sequence, outcome FROM operations WHERE run_id = ? ORDER BY 2, 1",
        (RUN_ID,),
    ) == [
        ("model.request", 0, "success"),
        ("tool.call", 0, "failure"),
        ("model.request", 1, "success"),
        ("retry.delay", 1000 * stride, "success"),
        ("tool.call", 1000 * stride, "success"),
    ]
