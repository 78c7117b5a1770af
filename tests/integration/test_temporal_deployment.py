"""The reference deployment (deploy/temporal): its entry point as a real process against the
dev server runs the repository's example, then drains and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO
from tests.integration.temporal_server import TemporalServer
from zincir.contract import Invocation, OperationKind, Success

try:
    from temporalio.client import Client

    from zincir.temporal import TemporalRuntime
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.integration

DEPLOY = REPO / "deploy" / "temporal"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "temporal_operations", REPO / "examples" / "temporal_operations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_entry_point_runs_the_example_and_drains_on_sigterm(
    temporal_server: TemporalServer, tmp_path: Path
) -> None:
    queue = f"deploy-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), str(REPO)]),
        "ZINCIR_REGISTRY": "temporal_operations:registry",
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_NAMESPACE": temporal_server.namespace,
        "TEMPORAL_TASK_QUEUE": queue,
        "ZINCIR_MAX_CONCURRENT_ACTIVITIES": "4",
        "ZINCIR_SHUTDOWN_GRACE": "10",
    }
    env.pop("ZINCIR_ENCRYPTION_KEYS", None)
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(DEPLOY / "worker.py")], env=env, stderr=err, text=True
        )
    try:
        deadline = time.monotonic() + 30
        while "serving 2 handler(s)" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.05)
        module = example()
        client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[
                (OperationKind.MODEL_REQUEST, "support-model"),
                (OperationKind.TOOL_CALL, "support-tools"),
            ],
        )
        invocations = module.operations(f"deploy-{uuid.uuid4().hex[:8]}")
        records = await module.execute_all(runtime, invocations)  # runs, then replays
        assert module.calls == []  # every handler ran in the worker process
        assert [r.invocation for r in records] == invocations
        assert any(isinstance(r.outcome, Success) for r in records)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert "stopping; running handlers have 10 s" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """deploy/temporal/worker.py as a process, once it serves (its stderr in ``log``)."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(DEPLOY / "worker.py")], env=env, stderr=err, text=True
        )
    deadline = time.monotonic() + 30
    while "serving" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc


async def test_sigterm_lets_a_running_handler_finish_and_the_next_worker_goes_on(
    temporal_server: TemporalServer, tmp_path: Path
) -> None:
    """A drained worker's handler runs to its end once; the workflow around it is finished
    by the next worker, which does not run the handler again."""
    queue = f"drain-{uuid.uuid4().hex}"
    marks = tmp_path / "marks"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "ZINCIR_REGISTRY": "tests.integration.slow_handlers:registry",
        "TEMPORAL_ADDRESS": temporal_server.address,
        "TEMPORAL_NAMESPACE": temporal_server.namespace,
        "TEMPORAL_TASK_QUEUE": queue,
        "ZINCIR_SHUTDOWN_GRACE": "20",
        "SLOW_HANDLER_MARKS": str(marks),
    }
    env.pop("ZINCIR_ENCRYPTION_KEYS", None)
    first = start_worker(env, tmp_path / "first.log")
    second = None
    try:
        client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
        runtime = TemporalRuntime(
            client, task_queue=queue, registrations=[(OperationKind.TOOL_CALL, "slow-tool")]
        )
        invocation = Invocation(
            f"drain-{uuid.uuid4().hex[:8]}",
            "tool.call",
            0,
            OperationKind.TOOL_CALL,
            "slow-tool",
            '{"seconds":2}',
        )
        running = asyncio.ensure_future(runtime.execute(invocation))
        deadline = time.monotonic() + 30
        while not marks.exists():
            assert not running.done(), running.result()
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            await asyncio.sleep(0.02)
        first.send_signal(signal.SIGTERM)  # the handler is inside its two-second sleep
        assert await asyncio.to_thread(first.wait, 30) == 0, (tmp_path / "first.log").read_text()
        assert marks.read_text() == "started\nfinished\n"  # it ran to its end
        second = start_worker(env, tmp_path / "second.log")
        record = await asyncio.wait_for(running, timeout=60)
        assert isinstance(record.outcome, Success)
        assert json.loads(record.outcome.output_json) == {"slept": 2}
        assert marks.read_text() == "started\nfinished\n"  # and ran once
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_container_and_unit_start_the_entry_point() -> None:
    containerfile = (DEPLOY / "Containerfile").read_text()
    entry = re.search(r'^ENTRYPOINT \["python", "([^"]+)"\]', containerfile, re.MULTILINE)
    assert entry is not None and (REPO / entry.group(1)).is_file()
    unit = (DEPLOY / "zincir-temporal-worker@.service").read_text()
    assert "deploy/temporal/worker.py" in unit and "KillSignal=SIGTERM" in unit


def test_the_environment_maps_to_the_worker_options() -> None:
    spec = importlib.util.spec_from_file_location("deploy_worker", DEPLOY / "worker.py")
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    args = worker.arguments(
        {"ZINCIR_REGISTRY": "app:registry", "TEMPORAL_TASK_QUEUE": "q", "TEMPORAL_TLS": "1"}
    )
    assert args == ["app:registry", "--task-queue", "q", "--tls"]
    with pytest.raises(SystemExit, match="ZINCIR_REGISTRY"):
        worker.arguments({})
