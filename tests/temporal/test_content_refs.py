"""Large inputs and records travel through Temporal as content references.

A TemporalRuntime and its workers given the same zincir store (``content_store=``) send an
input or record longer than 64 KiB as a reference to its content in that store: the workflow
histories hold references, and a conversation of several MiB runs (without a content store
an input over 1 MiB is refused, as before).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reference import lines
from tests.conftest import REPO
from tests.integration.temporal_server import TemporalServer
from tests.temporal.content_agents import (
    HANG_ENV,
    LOG_ENV,
    PAGE_CHARS,
    PAGES,
    echo_registry,
    reader,
)
from zincir import ContentMissing, InvalidInvocation
from zincir.agent import Runner
from zincir.contract import Invocation, OperationKind, Success, decode_record
from zincir.durable import HandlerRegistry, RetryPolicy
from zincir.store import OperationKey, Store

try:
    from temporalio.client import Client

    from zincir.temporal import ActivityTimeouts, TemporalRuntime, Worker
    from zincir.temporal._content import OFFLOAD_ABOVE, WIRE_PREFIX, ContentRef
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.temporal

PROMPT = "Read the document."
OUTPUT = f"read {PAGES} pages"
WORKER = Path(__file__).with_name("content_worker.py")
FAST_RETRY = RetryPolicy(
    max_attempts=5,
    initial_interval=timedelta(milliseconds=100),
    max_interval=timedelta(milliseconds=500),
)


@pytest.fixture
async def client(temporal_server: TemporalServer) -> Client:
    return await Client.connect(temporal_server.address, namespace=temporal_server.namespace)


def runtime_for(client: Client, queue: str, store: Store, **options: Any) -> TemporalRuntime:
    return TemporalRuntime(
        client,
        task_queue=queue,
        registrations=Runner.handlers_for(reader).configured(),
        record_store=store,
        retry=FAST_RETRY,
        **options,
    )


async def histories(client: Client, queue: str) -> dict[str, int]:
    """The history size in bytes of every workflow run on ``queue``, by workflow id."""
    sizes: dict[str, int] = {}
    async for execution in client.list_workflows(f'TaskQueue="{queue}"'):
        description = await client.get_workflow_handle(execution.id).describe()
        info = description.raw_description.workflow_execution_info
        sizes[execution.id] = info.history_size_bytes
    return sizes


async def all_histories(client: Client, queue: str, count: int) -> dict[str, int]:
    """:func:`histories` once visibility lists ``count`` workflows (it lags a little)."""
    for _ in range(100):
        sizes = await histories(client, queue)
        if len(sizes) >= count:
            return sizes
        await asyncio.sleep(0.1)
    raise AssertionError(f"visibility listed {len(sizes)} workflows, not {count}")


def conversation_bytes(result: Any) -> int:
    return len(json.dumps([message.model_dump(mode="json") for message in result.messages]))


async def test_a_conversation_of_several_mib_runs_on_temporal_through_references(
    client: Client, store: Store
) -> None:
    queue = f"content-{uuid.uuid4().hex}"
    runtime = runtime_for(client, queue, store, content_store=store)
    runner = Runner(store, [reader], runtime=runtime)
    async with Worker(client, runner.registry, queue, content_store=store):
        result = await runner.run(reader, PROMPT)
    assert result.output == OUTPUT and result.run_id is not None
    assert conversation_bytes(result) > PAGES * PAGE_CHARS > 3_500_000

    # 7 model requests and 6 tool calls, each a workflow holding references only
    sizes = await all_histories(client, queue, 2 * PAGES + 1)
    assert len(sizes) == 2 * PAGES + 1
    assert sum(sizes.values()) < 100_000, sizes
    assert max(sizes.values()) < 16_000, sizes

    # the records kept are the real ones, whole: the last request's input is the conversation
    row = await store.get_operation(OperationKey(result.run_id, "model.request", PAGES))
    assert row is not None and row.record is not None
    record = decode_record(row.record)
    assert len(record.invocation.input_json) > PAGES * PAGE_CHARS
    assert ContentRef.parse(record.invocation.input_json) is None
    assert record.input_digest == record.invocation.input_digest()

    # replay reads every record from the store and starts nothing
    again = await runner.run(reader, PROMPT, run_id=result.run_id)
    assert again.output == OUTPUT

    # what the histories refer to: each request's input but the first, each tool's record
    inputs, records = await references(client, sizes)
    assert len(inputs) == PAGES and len(records) == PAGES
    assert all(ref.size > OFFLOAD_ABOVE for ref in [*inputs, *records])
    digests = [first_digest(ref) for ref in [*inputs, *records]]
    assert set(await store.read_content(digests)) == set(digests)
    # the content is the run's: a prune of the run removes it
    report = await store.prune_runs(
        before=store.now() + timedelta(days=1), statuses=["completed"], max_events=10_000
    )
    assert report.run_ids == [result.run_id]
    assert await store.read_content(digests) == {}


async def test_content_pruned_under_a_runtime_is_written_again(
    client: Client, store_target: str
) -> None:
    """The runtime remembers what it wrote for a run; once the run is pruned, a worker that
    must read the run's content from the database fails closed, and the runtime writes the
    content again and starts the workflow anew."""
    queue = f"content-pruned-{uuid.uuid4().hex}"
    stores = [zincir.open_store(store_target) for _ in range(3)]
    runtime_store, first_worker, fresh_worker = stores
    try:
        runtime = runtime_for(client, queue, runtime_store, content_store=runtime_store)
        runner = Runner(runtime_store, [reader], runtime=runtime)
        async with Worker(client, runner.registry, queue, content_store=first_worker):
            result = await runner.run(reader, PROMPT)
        assert result.run_id is not None
        row = await runtime_store.get_operation(OperationKey(result.run_id, "model.request", PAGES))
        assert row is not None and row.record is not None
        last = decode_record(row.record).invocation
        report = await runtime_store.prune_runs(
            before=runtime_store.now() + timedelta(days=1),
            statuses=["completed"],
            max_events=10_000,
        )
        assert report.run_ids == [result.run_id]

        again = Invocation(
            last.run_id, last.step_id, 1000, last.kind, last.handler_id, last.input_json
        )
        async with Worker(client, runner.registry, queue, content_store=fresh_worker):
            record = await runtime.execute(again)
        assert isinstance(record.outcome, Success) and record.invocation == again
        statuses: list[str] = []
        for _ in range(100):  # visibility lags a little
            listed = client.list_workflows(f'WorkflowId="{runtime.workflow_id(again)}"')
            statuses = sorted(
                [execution.status.name async for execution in listed if execution.status]
            )
            if len(statuses) == 2:
                break
            await asyncio.sleep(0.1)
        assert statuses == ["COMPLETED", "FAILED"]  # failed closed, then started anew
    finally:
        for opened in stores:
            await opened.close()


async def references(
    client: Client, workflow_ids: Iterable[str]
) -> tuple[list[ContentRef], list[ContentRef]]:
    """The content references in the workflows' inputs and in their results."""
    inputs: list[ContentRef] = []
    records: list[ContentRef] = []
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        sent = json.loads(started.input.payloads[0].data)
        found = ContentRef.parse(sent["input_json"])
        if found is not None:
            inputs.append(found)
        wire = await handle.result()
        if wire.startswith(WIRE_PREFIX):
            ref = ContentRef.parse(wire[len(WIRE_PREFIX) :])
            assert ref is not None
            records.append(ref)
    return inputs, records


def first_digest(ref: ContentRef) -> str:
    """The digest of the first node or piece a reference's description names."""
    first = json.loads(ref.parts)[0]
    return str(first.get("n") or first.get("p"))


async def test_without_a_content_store_an_input_over_one_mib_is_refused(
    client: Client, store: Store
) -> None:
    queue = f"content-{uuid.uuid4().hex}"
    runtime = runtime_for(client, queue, store)
    runner = Runner(store, [reader], runtime=runtime)
    async with Worker(client, runner.registry, queue):
        with pytest.raises(InvalidInvocation, match="content_store=") as raised:
            await runner.run(reader, PROMPT, run_id="too-long")
    assert raised.value.run_id == "too-long"


def start_worker(
    server: TemporalServer, queue: str, target: str, log: Path, hang: int | None = None
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        LOG_ENV: str(log),
    }
    env.pop(HANG_ENV, None)
    if hang is not None:
        env[HANG_ENV] = str(hang)
    return subprocess.Popen(
        [sys.executable, str(WORKER), server.address, server.namespace, queue, target],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def read_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
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


@pytest.fixture
async def workers() -> AsyncIterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        stop(proc)


@pytest.mark.crash
async def test_a_worker_killed_inside_a_request_sent_by_reference_is_replaced(
    client: Client,
    temporal_server: TemporalServer,
    store_target: str,
    tmp_path: Path,
    workers: list[subprocess.Popen[str]],
) -> None:
    """SIGKILL inside the model request that has read 3 pages (its input, 1.8 MB, sent by
    reference); a new worker process reads the input from the store and finishes the run."""
    queue, log = f"content-kill-{uuid.uuid4().hex}", tmp_path / "log"
    workers.append(start_worker(temporal_server, queue, store_target, log, hang=3))
    assert await read_line(workers[0]) == "ready\n"
    store = zincir.open_store(store_target)
    try:
        runtime = runtime_for(
            client,
            queue,
            store,
            content_store=store,
            # a heartbeat timeout notices the killed worker; the retried attempt runs elsewhere
            timeouts=ActivityTimeouts(start_to_close=120, heartbeat=1),
        )
        runner = Runner(store, [reader], runtime=runtime)
        running = asyncio.create_task(runner.run(reader, PROMPT))
        assert await read_line(workers[0]) == "inside\n"
        stop(workers[0])
        assert not running.done()
        workers.append(start_worker(temporal_server, queue, store_target, log))
        assert await read_line(workers[1]) == "ready\n"
        result = await asyncio.wait_for(running, 120)
        assert result.output == OUTPUT
        assert conversation_bytes(result) > PAGES * PAGE_CHARS
    finally:
        await store.close()
    calls = lines(log)
    assert calls.count("model 3") == 2  # the killed request, then its retry
    assert [line for line in calls if line.startswith("tool")] == [
        f"tool {n}" for n in range(PAGES)
    ]
    sizes = await all_histories(client, queue, 2 * PAGES + 1)
    assert max(sizes.values()) < 32_000, sizes


# -- a reference to content the worker cannot read --------------------------------------------


def big_invocation(run_id: str) -> Invocation:
    document = json.dumps({"text": "x" * (2 * OFFLOAD_ABOVE), "n": 1})
    return Invocation(run_id, "tool.call", 0, OperationKind.TOOL_CALL, "echo", document)


@pytest.fixture
async def registry() -> HandlerRegistry:
    return echo_registry


async def test_a_reference_to_content_missing_from_the_workers_store_is_a_typed_error(
    client: Client, registry: HandlerRegistry, tmp_path: Path
) -> None:
    """The worker reads another store than the runtime wrote to: ContentMissing names the
    run and says what to do; nothing is recorded, and the right worker then runs it."""
    queue = f"content-missing-{uuid.uuid4().hex}"
    written, other = zincir.open_store(tmp_path / "a.db"), zincir.open_store(tmp_path / "b.db")
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "echo")],
            content_store=written,
            retry=FAST_RETRY,
        )
        invocation = big_invocation(f"missing-{uuid.uuid4().hex}")
        async with Worker(client, registry, queue, content_store=other):
            with pytest.raises(ContentMissing, match="same store") as raised:
                await runtime.execute(invocation)
        assert raised.value.run_id == invocation.run_id
        assert invocation.run_id in str(raised.value)
        async with Worker(client, registry, queue, content_store=written):
            record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Success)
        assert json.loads(record.outcome.output_json) == {"chars": 2 * OFFLOAD_ABOVE}
        assert record.invocation == invocation
    finally:
        await written.close()
        await other.close()


async def test_a_worker_without_a_content_store_says_to_give_it_one(
    client: Client, registry: HandlerRegistry, tmp_path: Path
) -> None:
    queue = f"content-none-{uuid.uuid4().hex}"
    store = zincir.open_store(tmp_path / "a.db")
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "echo")],
            content_store=store,
            retry=FAST_RETRY,
        )
        invocation = big_invocation(f"none-{uuid.uuid4().hex}")
        async with Worker(client, registry, queue):
            with pytest.raises(ContentMissing, match=r"pass content_store=") as raised:
                await runtime.execute(invocation)
        assert raised.value.run_id == invocation.run_id
    finally:
        await store.close()


async def long_answer(invocation: Invocation, request: Any) -> Any:
    return {"text": "y" * (3 * 1024 * 1024)}  # over the 2 MiB Temporal payload whole


LONG = HandlerRegistry()
LONG.register(OperationKind.TOOL_CALL, "long", long_answer)


async def test_a_small_input_travels_whole_and_a_large_output_by_reference(
    client: Client, tmp_path: Path
) -> None:
    queue = f"content-out-{uuid.uuid4().hex}"
    store = zincir.open_store(tmp_path / "a.db")
    registry = LONG
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "long")],
            content_store=store,
            retry=FAST_RETRY,
        )
        invocation = Invocation(
            f"out-{uuid.uuid4().hex}", "tool.call", 0, OperationKind.TOOL_CALL, "long", "{}"
        )
        async with Worker(client, registry, queue, content_store=store):
            record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Success)
        assert json.loads(record.outcome.output_json) == {"text": "y" * (3 * 1024 * 1024)}
        handle = client.get_workflow_handle(runtime.workflow_id(invocation))
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert json.loads(started.input.payloads[0].data) == invocation.to_dict()
        description = await handle.describe()
        assert description.raw_description.workflow_execution_info.history_size_bytes < 8_000
    finally:
        await store.close()


async def test_a_record_reference_the_runtime_cannot_resolve_is_a_typed_error(
    client: Client, tmp_path: Path
) -> None:
    """The worker kept the record in another store: ContentMissing names the run and the
    workflow, and says what to do."""
    queue = f"content-rec-{uuid.uuid4().hex}"
    mine, theirs = zincir.open_store(tmp_path / "a.db"), zincir.open_store(tmp_path / "b.db")
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "long")],
            content_store=mine,
            retry=FAST_RETRY,
        )
        invocation = Invocation(
            f"rec-{uuid.uuid4().hex}", "tool.call", 0, OperationKind.TOOL_CALL, "long", "{}"
        )
        async with Worker(client, LONG, queue, content_store=theirs):
            with pytest.raises(ContentMissing, match="the record of workflow") as raised:
                await runtime.execute(invocation)
        assert raised.value.run_id == invocation.run_id
        assert runtime.workflow_id(invocation) in str(raised.value)
        assert "content_store" in str(raised.value)
    finally:
        await mine.close()
        await theirs.close()


async def test_the_cli_worker_reads_references_from_its_content_store(
    client: Client, temporal_server: TemporalServer, tmp_path: Path
) -> None:
    """``zincir temporal-worker --content-store PATH`` serves inputs sent by reference."""
    queue, db = f"content-cli-{uuid.uuid4().hex}", tmp_path / "x.db"
    store = zincir.open_store(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zincir",
            "temporal-worker",
            "tests.temporal.content_agents:echo_registry",
            "--address",
            temporal_server.address,
            "--task-queue",
            queue,
            "--content-store",
            str(db),
        ],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert worker.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(worker.stderr.readline), 60)
        assert "serving 1 handler(s)" in line, line + worker.stderr.read()[-3000:]
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "echo")],
            content_store=store,
            retry=FAST_RETRY,
        )
        invocation = big_invocation(f"cli-{uuid.uuid4().hex}")
        record = await asyncio.wait_for(runtime.execute(invocation), 60)
        assert isinstance(record.outcome, Success)
        assert json.loads(record.outcome.output_json) == {"chars": 2 * OFFLOAD_ABOVE}
    finally:
        await store.close()
        stop(worker, signal.SIGTERM)
    assert worker.returncode == 0
