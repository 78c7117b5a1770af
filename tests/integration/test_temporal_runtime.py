"""TemporalRuntime on a real local Temporal server: what the conformance suite does not cover.

Workflow shape and ids, limits, retries, fail-closed paths, retention with a record store,
a worker killed mid-activity (a separate process), the CLI worker and the import guard.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import zincir
from tests.conftest import REPO, dunder_all_order
from tests.helpers import WHOLE_RECORD, rows, whole_record
from tests.integration.temporal_server import TemporalServer
from zincir import (
    AgentContext,
    DigestMismatch,
    FencedOut,
    InputDrift,
    InvalidInput,
    InvalidInvocation,
    MissingDurableHandler,
    OperationFailed,
    StoreError,
)
from zincir.contract import Failure, Invocation, OperationKind, Record, Success, encode_record
from zincir.durable import HandlerRegistry, RetryPolicy

try:
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
    from temporalio.client import Client, WorkflowExecutionStatus
    from temporalio.common import RetryPolicy as TemporalRetryPolicy
    from temporalio.service import RPCError, RPCStatusCode

    from zincir.temporal import (
        ACTIVITY_NAME,
        WORKFLOW_NAME,
        ActivityTimeouts,
        TemporalRuntime,
        Worker,
        workflow_id_for,
    )
    from zincir.temporal._cli import temporal_worker_command
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.integration

TOOLS = "runtime-tools"
FAST_RETRY = RetryPolicy(
    max_attempts=2,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)
WORKER_PROC = REPO / "tests" / "integration" / "temporal_worker_proc.py"


def invocation(
    run_id: str | None = None,
    *,
    sequence: int = 0,
    request: Any = None,
    input_json: str | None = None,
    handler_id: str = TOOLS,
) -> Invocation:
    document = json.dumps({"order": "A1"} if request is None else request)
    return Invocation(
        run_id or f"rt-{uuid.uuid4().hex}",
        "tool.call",
        sequence,
        OperationKind.TOOL_CALL,
        handler_id,
        document if input_json is None else input_json,
    )


class Counting:
    """A handler that counts calls and answers with ``answer``."""

    def __init__(
        self, answer: Callable[[Invocation, Any], Any] | None = None, delay: float = 0.0
    ) -> None:
        self.calls: list[Invocation] = []
        self.answer = answer
        self.delay = delay

    async def __call__(self, invocation: Invocation, request: Any) -> Any:
        self.calls.append(invocation)
        if self.delay:
            await asyncio.sleep(self.delay)
        return {"ok": request} if self.answer is None else self.answer(invocation, request)


@pytest.fixture
async def client(temporal_server: TemporalServer) -> Client:
    return await Client.connect(temporal_server.address, namespace=temporal_server.namespace)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as exits:
        yield exits


@pytest.fixture
def serve(client: Client, stack: AsyncExitStack) -> Callable[..., Any]:
    """Start a Worker for ``handler`` on a fresh task queue; return a runtime for it."""

    async def start(handler: Any, **runtime_options: Any) -> TemporalRuntime:
        registry = HandlerRegistry()
        registry.register(OperationKind.TOOL_CALL, TOOLS, handler)
        queue = f"rt-{uuid.uuid4().hex}"
        await stack.enter_async_context(Worker(client, registry, queue))
        runtime_options.setdefault("retry", FAST_RETRY)
        return TemporalRuntime(
            client, task_queue=queue, registrations=[("tool_call", TOOLS)], **runtime_options
        )

    return start


async def status_of(client: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        assert error.status == RPCStatusCode.NOT_FOUND
        return None
    return description.status


async def delete_workflow(client: Client, workflow_id: str) -> None:
    """Delete a closed workflow as retention would, and wait until it is gone."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id),
        )
    )
    deadline = time.monotonic() + 20
    while await status_of(client, workflow_id) is not None:
        assert time.monotonic() < deadline, "the workflow was not deleted"
        await asyncio.sleep(0.1)


# -- workflow shape -------------------------------------------------------------------------


async def test_one_workflow_per_identity_with_the_invocation_as_input(
    client: Client, serve: Callable[..., Any]
) -> None:
    runtime = await serve(Counting())
    inv = invocation(f"odd ids/\u00e9\t?*{uuid.uuid4().hex}"[:60].replace("\t", "_"))
    record = await runtime.execute(inv)
    workflow_id = workflow_id_for(inv)
    assert runtime.workflow_id(inv) == workflow_id
    assert workflow_id.startswith("zincir-op-") and len(workflow_id) == len("zincir-op-") + 64
    handle = client.get_workflow_handle(workflow_id)
    description = await handle.describe()
    assert description.workflow_type == WORKFLOW_NAME
    assert description.task_queue == runtime.task_queue
    assert description.status == WorkflowExecutionStatus.COMPLETED
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    first_input = json.loads(started.input.payloads[0].data)
    assert first_input == inv.to_dict()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == [ACTIVITY_NAME]
    assert await handle.result() == encode_record(record)


async def test_twenty_concurrent_executes_run_the_handler_once(serve: Callable[..., Any]) -> None:
    handler = Counting(delay=0.3)
    runtime = await serve(handler)
    inv = invocation()
    records = await asyncio.gather(*(runtime.execute(inv) for _ in range(20)))
    assert len(handler.calls) == 1
    assert all(record == records[0] for record in records)
    assert records[0].outcome == Success('{"ok":{"order":"A1"}}')


async def test_drift_against_a_running_workflow_is_refused_before_it_finishes(
    serve: Callable[..., Any],
) -> None:
    release = asyncio.Event()

    async def slow(invocation: Invocation, request: Any) -> Any:
        await release.wait()
        return request

    runtime = await serve(slow)
    original = invocation(request={"order": "A1"})
    first = asyncio.create_task(runtime.execute(original))
    await asyncio.sleep(0.3)
    drifted = invocation(original.run_id, request={"order": "B2"})
    with pytest.raises(InputDrift):
        await asyncio.wait_for(runtime.execute(drifted), 10)
    assert not first.done()
    release.set()
    assert (await first).outcome == Success('{"order":"A1"}')


# -- limits -------------------------------------------------------------------------------


async def test_oversized_input_is_refused_before_any_start(
    client: Client, serve: Callable[..., Any]
) -> None:
    handler = Counting()
    runtime = await serve(handler)
    big = invocation(input_json=json.dumps("x" * (1024 * 1024)))
    with pytest.raises(InvalidInvocation, match="limit"):
        await runtime.execute(big)
    small_limit = await serve(handler, max_input_bytes=64)
    with pytest.raises(InvalidInvocation):
        await small_limit.execute(invocation(request={"note": "y" * 100}))
    assert handler.calls == []
    assert await status_of(client, workflow_id_for(big)) is None


async def test_missing_handler_starts_no_workflow(
    client: Client, serve: Callable[..., Any]
) -> None:
    runtime = await serve(Counting())
    inv = invocation(handler_id="nobody")
    with pytest.raises(MissingDurableHandler, match="no workflow was started"):
        await runtime.execute(inv)
    assert await status_of(client, workflow_id_for(inv)) is None


async def test_oversized_record_becomes_a_failure_record(serve: Callable[..., Any]) -> None:
    handler = Counting(lambda inv, request: "x" * 20_000)
    runtime = await serve(handler, max_record_bytes=10_000)
    inv = invocation()
    record = await runtime.execute(inv)
    assert isinstance(record.outcome, Failure)
    assert (record.outcome.error, record.outcome.retryable) == ("RecordTooLarge", False)
    assert "10000" in record.outcome.message
    assert await runtime.execute(inv) == record
    assert len(handler.calls) == 1


async def test_large_records_travel_compressed_and_incompressible_ones_fail(
    serve: Callable[..., Any],
) -> None:
    three_mib = "x" * (3 * 1024 * 1024)
    noise = base64.b64encode(os.urandom(3 * 1024 * 1024)).decode()
    runtime = await serve(Counting(lambda inv, request: three_mib if request == 1 else noise))
    record = await runtime.execute(invocation(request=1))
    assert record.outcome == Success(json.dumps(three_mib))
    failed = await runtime.execute(invocation(request=2))
    assert isinstance(failed.outcome, Failure)
    assert failed.outcome.error == "RecordTooLarge"
    assert "Temporal payload" in failed.outcome.message


async def test_unreachable_service_missing_handler_or_store_error() -> None:
    from zincir.temporal.testing import free_loopback_port

    client = await Client.connect(f"127.0.0.1:{free_loopback_port()}", lazy=True)
    runtime = TemporalRuntime(client, task_queue="q", registrations=[("tool_call", TOOLS)])
    with pytest.raises(MissingDurableHandler):
        await runtime.execute(invocation(handler_id="nobody"))
    with pytest.raises(StoreError, match="cannot reach the Temporal service"):
        await runtime.execute(invocation())


# -- retries and failures -------------------------------------------------------------------


async def test_heartbeats_keep_a_long_handler_alive(serve: Callable[..., Any]) -> None:
    handler = Counting(delay=1.6)
    runtime = await serve(handler, timeouts=ActivityTimeouts(start_to_close=30, heartbeat=0.5))
    record = await runtime.execute(invocation())
    assert record.outcome == Success('{"ok":{"order":"A1"}}')
    assert len(handler.calls) == 1


async def test_retryable_failures_are_retried_then_persisted(serve: Callable[..., Any]) -> None:
    def limited(inv: Invocation, request: Any) -> Any:
        raise OperationFailed("RateLimited", retryable=True, message="slow down")

    always = Counting(limited)
    runtime = await serve(always)
    inv = invocation()
    record = await runtime.execute(inv)
    assert record.outcome == Failure("RateLimited", True, "slow down")
    assert len(always.calls) == FAST_RETRY.max_attempts
    assert all(call == inv for call in always.calls)
    assert await runtime.execute(inv) == record
    assert len(always.calls) == FAST_RETRY.max_attempts


async def test_a_transient_failure_is_absorbed(serve: Callable[..., Any]) -> None:
    def flaky(inv: Invocation, request: Any) -> Any:
        if len(handler.calls) == 1:
            raise OperationFailed("Unavailable", retryable=True)
        return "second time"

    handler = Counting(flaky)
    runtime = await serve(handler)
    record = await runtime.execute(invocation())
    assert record.outcome == Success('"second time"')
    assert len(handler.calls) == 2


async def test_a_temporalio_retry_policy_is_accepted(serve: Callable[..., Any]) -> None:
    def limited(inv: Invocation, request: Any) -> Any:
        raise OperationFailed("RateLimited", retryable=True)

    handler = Counting(limited)
    policy = TemporalRetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=2)
    runtime = await serve(handler, retry=policy, timeouts={"start_to_close": 5})
    record = await runtime.execute(invocation())
    assert record.outcome == Failure("RateLimited", True, "")
    assert len(handler.calls) == 2


async def test_a_record_for_another_invocation_fails_closed(
    client: Client, serve: Callable[..., Any]
) -> None:
    other = invocation(request={"order": "Z9"})
    handler = Counting(lambda inv, request: Record.for_invocation(other, Success("1")))
    runtime = await serve(handler)
    inv = invocation()
    with pytest.raises(DigestMismatch) as raised:
        await runtime.execute(inv)
    assert raised.value.run_id == inv.run_id
    assert await status_of(client, workflow_id_for(inv)) == WorkflowExecutionStatus.FAILED
    # nothing was persisted: a later execute runs the handler again (and fails closed again)
    with pytest.raises(DigestMismatch):
        await runtime.execute(inv)
    assert len(handler.calls) == 2


async def test_a_record_for_other_input_under_the_same_key_is_drift(
    serve: Callable[..., Any],
) -> None:
    def swapped(inv: Invocation, request: Any) -> Record:
        changed = Invocation(
            inv.run_id, inv.step_id, inv.sequence, inv.kind, inv.handler_id, '{"order":"B2"}'
        )
        return Record.for_invocation(changed, Success("1"))

    runtime = await serve(Counting(swapped))
    with pytest.raises(InputDrift):
        await runtime.execute(invocation())


async def test_constructor_refuses_bad_options(client: Client) -> None:
    with pytest.raises(InvalidInput):
        TemporalRuntime(client, task_queue="q", registrations=[("shell", "x")])
    with pytest.raises(InvalidInput):
        TemporalRuntime(client, task_queue="q", registrations=[], timeouts=5, activity_timeouts=5)
    with pytest.raises(InvalidInput):
        TemporalRuntime(client, task_queue="q", registrations=[], retry=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        ActivityTimeouts(start_to_close=None)
    assert TemporalRuntime(
        client, task_queue="q", registrations=[], timeouts=2.5
    ).timeouts == ActivityTimeouts(start_to_close=2.5)


# -- retention --------------------------------------------------------------------------------


async def test_record_store_keeps_records_beyond_retention(
    client: Client, serve: Callable[..., Any], tmp_path: Path
) -> None:
    store = zincir.open_store(tmp_path / "records.db")
    try:
        handler = Counting()
        runtime = await serve(handler, record_store=store)
        inv = invocation()
        record = await runtime.execute(inv)
        [(status, outcome, owner, expires, *stored)] = rows(
            tmp_path / "records.db",
            f"SELECT status, outcome, claim_owner, claim_expires_at, {WHOLE_RECORD} "
            "FROM operations WHERE run_id = ?",
            (inv.run_id,),
        )
        assert (status, outcome, whole_record(*stored), owner, expires) == (
            "completed",
            "success",
            encode_record(record),
            None,
            None,
        )
        await delete_workflow(client, workflow_id_for(inv))
        assert await runtime.execute(inv) == record
        assert len(handler.calls) == 1
        with pytest.raises(InputDrift):
            await runtime.execute(invocation(inv.run_id, request={"order": "B2"}))
        assert await status_of(client, workflow_id_for(inv)) is None
    finally:
        await store.close()


async def test_record_store_writes_a_runs_log_only_under_its_lease(
    client: Client, serve: Callable[..., Any], tmp_path: Path
) -> None:
    """Under this process's lease the record comes with operation_completed; once the run
    was taken over, execute raises FencedOut and keeps nothing; without a lease, no event."""
    path = tmp_path / "records.db"
    store, new_store = zincir.open_store(path), zincir.open_store(path)
    try:
        handler = Counting()
        runtime = await serve(handler, record_store=store)
        run_id = f"rt-{uuid.uuid4().hex}"
        ctx = await AgentContext.create(store, "temporal-run", run_id=run_id)
        await runtime.execute(invocation(run_id, sequence=0))
        [event] = [e for e in await store.list_events(run_id) if e.type == "operation_completed"]
        assert (event.payload["sequence"], event.payload["attempts"]) == (0, 1)
        new_ctx = await AgentContext.force_recover(new_store, run_id)
        before = await new_store.list_events(run_id)
        with pytest.raises(FencedOut):
            await runtime.execute(invocation(run_id, sequence=1))
        assert await new_store.list_events(run_id) == before
        assert rows(path, "SELECT sequence FROM operations WHERE run_id = ?", (run_id,)) == [(0,)]
        taker = TemporalRuntime(
            client,
            task_queue=runtime.task_queue,
            registrations=[("tool_call", TOOLS)],
            record_store=new_store,
        )
        record = await taker.execute(invocation(run_id, sequence=1))  # the workflow's record
        assert len(handler.calls) == 2
        events = await new_store.list_events(run_id)
        assert [e.payload["sequence"] for e in events if e.type == "operation_completed"] == [0, 1]
        await new_ctx.close()
        await ctx.close()
        lone = await runtime.execute(invocation(run_id, sequence=2))  # no lease held now
        assert await new_store.list_events(run_id) == events
        assert [
            whole_record(*stored)
            for stored in rows(
                path,
                f"SELECT {WHOLE_RECORD} FROM operations WHERE run_id = ? ORDER BY sequence",
                (run_id,),
            )
        ][1:] == [encode_record(record), encode_record(lone)]
    finally:
        await store.close()
        await new_store.close()


async def test_without_record_store_replay_holds_only_within_retention(
    client: Client, serve: Callable[..., Any]
) -> None:
    handler = Counting()
    runtime = await serve(handler)
    inv = invocation()
    first = await runtime.execute(inv)
    assert await runtime.execute(inv) == first
    await delete_workflow(client, workflow_id_for(inv))
    assert await runtime.execute(inv) == first  # same output, but the handler ran again
    assert len(handler.calls) == 2


# -- a worker killed mid-activity ---------------------------------------------------------------


def _spawn(args: list[str], markers: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "ZINCIR_TEST_MARKERS": str(markers),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
    }
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"worker exited early: {proc.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        await asyncio.sleep(0.02)


async def test_killed_worker_mid_activity_is_replaced_by_a_new_one(
    client: Client, temporal_server: TemporalServer, tmp_path: Path
) -> None:
    queue = f"kill-{uuid.uuid4().hex}"
    first = _spawn([str(WORKER_PROC), temporal_server.address, queue], tmp_path)
    second: subprocess.Popen[str] | None = None
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=[("tool_call", "blocking-tool")],
            retry=RetryPolicy(
                max_attempts=5,
                initial_interval=timedelta(milliseconds=100),
                max_interval=timedelta(milliseconds=500),
            ),
            timeouts=ActivityTimeouts(start_to_close=60, heartbeat=1),
        )
        inv = invocation(handler_id="blocking-tool")
        running = asyncio.create_task(runtime.execute(inv))
        await _wait_for(tmp_path / "blocked", first)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
        (tmp_path / "release").touch()
        # the replacement runs through the CLI command
        second = _spawn(
            [
                "-m",
                "zincir.temporal._cli",
                "tests.integration.temporal_worker_proc:registry",
                "--address",
                temporal_server.address,
                "--task-queue",
                queue,
            ],
            tmp_path,
        )
        record = await asyncio.wait_for(running, 60)
        assert record.outcome == Success('{"done":{"order":"A1"}}')
        calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
        assert [call["pid"] for call in calls] == [first.pid, second.pid]
        assert all(Invocation.from_dict(call["invocation"]) == inv for call in calls)
        assert await runtime.execute(inv) == record
        assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=20)
        assert second.returncode == 0, err
        assert "serving 1 handler(s)" in err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


# -- CLI and import guard ---------------------------------------------------------------------


def test_cli_refuses_a_target_that_is_not_a_registry() -> None:
    runner = CliRunner()
    result = runner.invoke(temporal_worker_command, ["json:dumps", "--task-queue", "q"])
    assert result.exit_code == 2 and "HandlerRegistry" in result.output
    result = runner.invoke(temporal_worker_command, ["no_such_module_x:r", "--task-queue", "q"])
    assert result.exit_code == 2 and "cannot import" in result.output
    result = runner.invoke(temporal_worker_command, ["nocolon", "--task-queue", "q"])
    assert result.exit_code == 2 and "module:attribute" in result.output


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, text=True, capture_output=True, timeout=60
    )


def test_the_core_never_imports_temporalio() -> None:
    done = _python(
        "import sys, zincir, zincir.durable, zincir.contract, zincir.cli\n"
        "assert 'temporalio' not in sys.modules, 'temporalio was imported'"
    )
    assert done.returncode == 0, done.stderr


def test_without_temporalio_the_import_error_names_the_extra() -> None:
    done = _python(
        "import sys\nsys.modules['temporalio'] = None\n"
        "try:\n    import zincir.temporal\n"
        "except ImportError as error:\n    print(error)\n"
        "else:\n    raise SystemExit('imported')"
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "zincir[temporal]"' in done.stdout


def test_public_names_are_pinned() -> None:
    import zincir.temporal
    import zincir.temporal.testing

    assert zincir.temporal.__all__ == [
        "ACTIVITY_NAME",
        "WORKFLOW_NAME",
        "ActivityTimeouts",
        "EncryptionCodec",
        "TemporalRuntime",
        "Worker",
        "data_converter",
        "workflow_id_for",
    ]
    assert dunder_all_order(zincir.temporal.__all__) == zincir.temporal.__all__
    # The dev server is a test helper, kept out of the runtime API.
    assert zincir.temporal.testing.__all__ == [
        "DevServer",
        "find_temporal_binary",
        "free_loopback_port",
    ]
    assert (WORKFLOW_NAME, ACTIVITY_NAME) == ("zincir.operation.v1", "zincir.execute.v1")
