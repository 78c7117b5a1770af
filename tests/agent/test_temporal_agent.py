"""The durable agent on a TemporalRuntime, its handlers served by a Worker in another process.

The worker is SIGKILLed inside the third model request (after the second tool's record was
committed); a new worker process takes over and the agent, run again under the same run id,
gets every stored record back: only the in-flight model request runs again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import HANDLERS, build, lines
from tests.conftest import REPO
from tests.helpers import rows, seqs
from tests.integration.temporal_server import TemporalServer
from zincir.agent import Agent, DurableBinding
from zincir.durable import RetryPolicy

try:
    from temporalio.client import Client

    from zincir.temporal import ActivityTimeouts, TemporalRuntime
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = [pytest.mark.temporal, pytest.mark.crash]

WORKER = Path(__file__).with_name("temporal_agent_worker.py")
LEASE_TTL = timedelta(milliseconds=500)
RUN_ID = "temporal-crash-run"
OUTPUT = "done: first=1 + second=2"


@pytest.fixture
async def client(temporal_server: TemporalServer) -> Client:
    return await Client.connect(temporal_server.address, namespace=temporal_server.namespace)


def start_worker(
    server: TemporalServer, queue: str, log: Path, *options: str
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.Popen(
        [sys.executable, str(WORKER), server.address, server.namespace, queue, str(log), *options],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def read_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """The worker's next stdout line (its stderr tail if it exited instead)."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if not line and proc.stderr is not None:
        raise AssertionError(f"the worker exited: {proc.stderr.read()[-3000:]}")
    return line


def stop(proc: subprocess.Popen[str], sig: signal.Signals = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def runtime_for(client: Client, queue: str, store: zincir.SQLiteStore) -> TemporalRuntime:
    return TemporalRuntime(
        client,
        task_queue=queue,
        registrations=HANDLERS.configured(),
        record_store=store,
        # a heartbeat timeout notices the killed worker; the retried attempt runs elsewhere
        timeouts=ActivityTimeouts(start_to_close=60, heartbeat=1),
        retry=RetryPolicy(
            max_attempts=5,
            initial_interval=timedelta(milliseconds=100),
            max_interval=timedelta(milliseconds=500),
        ),
    )


async def run_until_leased(agent: Agent, binding: DurableBinding) -> str:
    """Run the agent, waiting while the previous attempt's lease is still live."""
    deadline = time.monotonic() + 30
    while True:
        try:
            result = await agent.run("Use both tools.", durable=binding)
            return result.output
        except zincir.LeaseHeld:
            assert time.monotonic() < deadline, "the run's lease never expired"
            await asyncio.sleep(0.05)


async def test_killed_temporal_worker_replays_only_the_in_flight_model_request(
    client: Client, temporal_server: TemporalServer, tmp_path: Path
) -> None:
    db, log = tmp_path / "x.db", tmp_path / "log"
    queue = f"agent-kill-{uuid.uuid4().hex}"
    first = start_worker(temporal_server, queue, log, "--hang-at", "2")
    second: subprocess.Popen[str] | None = None
    store = zincir.open_store(db)
    try:
        assert await read_line(first) == "ready\n"
        agent = build(log)  # the agent process's copy: its tools must never run here
        binding = DurableBinding(
            runtime_for(client, queue, store), RUN_ID, HANDLERS, lease_ttl=LEASE_TTL, store=store
        )
        running = asyncio.create_task(agent.run("Use both tools.", durable=binding))
        assert await read_line(first) == "inside\n"
        assert lines(log) == ["model 0", "tool first 1", "model 1", "tool second 2", "model 2"]
        committed = rows(
            db, "SELECT step_id, sequence FROM operations WHERE status = 'completed' ORDER BY 1, 2"
        )
        assert committed == [
            ("model.request", 0),
            ("model.request", 1),
            ("tool.call", 0),
            ("tool.call", 1000),
        ]
        stop(first)  # SIGKILL inside the third model request
        assert not running.done()
        running.cancel()  # the agent side gives up too; it is run again below
        with pytest.raises(asyncio.CancelledError):
            await running

        second = start_worker(temporal_server, queue, log)
        assert await read_line(second) == "ready\n"
        output = await asyncio.wait_for(
            run_until_leased(
                agent,
                DurableBinding(
                    runtime_for(client, queue, store),
                    RUN_ID,
                    HANDLERS,
                    lease_ttl=LEASE_TTL,
                    store=store,
                ),
            ),
            90,
        )
        assert output == OUTPUT
        assert lines(log) == [
            "model 0",
            "tool first 1",
            "model 1",
            "tool second 2",
            "model 2",
            "model 2",
        ]

        # Completed: run again, nothing is called (not even Temporal: no worker serves it).
        stop(second, signal.SIGTERM)
        again = DurableBinding(
            runtime_for(client, queue, store), RUN_ID, HANDLERS, lease_ttl=LEASE_TTL, store=store
        )
        assert (await agent.run("Use both tools.", durable=again)).output == OUTPUT
        assert len(lines(log)) == 6
    finally:
        await store.close()
        for proc in (first, second):
            if proc is not None:
                stop(proc)

    found = seqs(db, RUN_ID)
    assert found == list(range(1, len(found) + 1))
    types = [
        t for (t,) in rows(db, "SELECT type FROM events WHERE run_id = ? ORDER BY seq", (RUN_ID,))
    ]
    assert types.count("llm_call") == 3 and types.count("tool_result") == 2
    assert rows(db, "SELECT status FROM agent_runs WHERE id = ?", (RUN_ID,)) == [("completed",)]
    operations = rows(db, "SELECT step_id, sequence, status FROM operations ORDER BY 1, 2")
    assert operations == [
        ("model.request", 0, "completed"),
        ("model.request", 1, "completed"),
        ("model.request", 2, "completed"),
        ("tool.call", 0, "completed"),
        ("tool.call", 1000, "completed"),
    ]


async def test_preflight_checks_the_temporal_registrations_before_anything_is_stored(
    client: Client, tmp_path: Path
) -> None:
    """A handler the workers do not serve is refused before any model call or stored row."""
    store = zincir.open_store(tmp_path / "x.db")
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=f"agent-pre-{uuid.uuid4().hex}",
            registrations=[("model_request", "ref-model")],  # the tool handler is missing
            record_store=store,
        )
        binding = DurableBinding(runtime, "pre-run", HANDLERS)  # the run lives in record_store
        log = tmp_path / "log"
        with pytest.raises(zincir.MissingDurableHandler, match="ref-tools"):
            # bounded: without the check the model request waits for a worker that never comes
            await asyncio.wait_for(build(log).run("Use both tools.", durable=binding), 10)
        assert lines(log) == []
        assert await store.get_run("pre-run") is None
    finally:
        await store.close()
