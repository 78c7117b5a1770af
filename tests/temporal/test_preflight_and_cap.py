"""TemporalRuntime checks before it sends: the registration table before any RPC, and the
whole start request against 2 MiB (encoded as it is sent, through the data converter and
the encryption codec), on a real local Temporal server."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.integration.temporal_server import TemporalServer
from zincir import Encryption, InvalidInvocation, MissingDurableHandler
from zincir._encryption import KEYS_ENV
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry

try:
    from temporalio.client import (
        Client,
        DescribeWorkflowInput,
        Interceptor,
        OutboundInterceptor,
        StartWorkflowInput,
        WorkflowHandle,
    )
    from temporalio.client import WorkflowExecutionDescription as Description
    from temporalio.service import RPCError, RPCStatusCode

    from zincir.temporal import TemporalRuntime, Worker, workflow_id_for
    from zincir.temporal._runtime import _MEMO_DIGEST, _MEMO_KEY, MAX_START_REQUEST_BYTES
    from zincir.temporal.testing import free_loopback_port
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.integration

TOOLS = "cap-tools"


class CountCalls(Interceptor):
    """Counts the client's workflow calls (each is one RPC or more)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.calls)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, calls: list[str]) -> None:
        super().__init__(next)
        self.calls = calls

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        self.calls.append("start")
        return await super().start_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Description:
        self.calls.append("describe")
        return await super().describe_workflow(input)


def invocation(request: Any = None, *, handler_id: str = TOOLS) -> Invocation:
    return Invocation(
        f"cap-{uuid.uuid4().hex}",
        "tool.call",
        0,
        OperationKind.TOOL_CALL,
        handler_id,
        json.dumps({"order": "A1"} if request is None else request),
    )


@pytest.fixture(autouse=True)
def no_keys_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as exits:
        yield exits


@pytest.fixture
def counter() -> CountCalls:
    return CountCalls()


@pytest.fixture
async def client(temporal_server: TemporalServer, counter: CountCalls) -> Client:
    return await Client.connect(
        temporal_server.address, namespace=temporal_server.namespace, interceptors=[counter]
    )


@pytest.fixture
def serve(client: Client, stack: AsyncExitStack) -> Callable[..., Any]:
    """A worker for a counting handler on a fresh queue; returns (queue, calls)."""

    async def start(encryption: Encryption | None = None) -> tuple[str, list[Invocation]]:
        calls: list[Invocation] = []

        async def handler(inv: Invocation, request: Any) -> Any:
            calls.append(inv)
            return {"size": len(json.dumps(request))}

        registry = HandlerRegistry()
        registry.register(OperationKind.TOOL_CALL, TOOLS, handler)
        queue = f"cap-{uuid.uuid4().hex}"
        await stack.enter_async_context(Worker(client, registry, queue, encryption=encryption))
        return queue, calls

    return start


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as error:
        assert error.status == RPCStatusCode.NOT_FOUND
        return False
    return True


# -- the registration table before any I/O ----------------------------------------------------


async def test_an_unregistered_pair_raises_with_no_rpc(
    client: Client, counter: CountCalls, serve: Callable[..., Any], tmp_path: Path
) -> None:
    queue, calls = await serve()
    store = zincir.open_store(tmp_path / "records.db")
    try:
        runtime = TemporalRuntime(
            client, task_queue=queue, registrations=[("tool_call", TOOLS)], record_store=store
        )
        stored = await runtime.execute(invocation())
        counter.calls.clear()
        retired = TemporalRuntime(client, task_queue=queue, registrations=[], record_store=store)
        started = time.perf_counter()
        with pytest.raises(MissingDurableHandler, match="find_unregistered=True") as raised:
            await retired.execute(stored.invocation)  # its record exists in both places
        elapsed = time.perf_counter() - started
        assert counter.calls == []
        assert raised.value.run_id == stored.invocation.run_id
        assert elapsed < 0.05, elapsed
        assert len(calls) == 1
    finally:
        await store.close()


async def test_an_unregistered_pair_never_waits_on_an_unreachable_service() -> None:
    client = await Client.connect(f"127.0.0.1:{free_loopback_port()}", lazy=True)
    runtime = TemporalRuntime(client, task_queue="q", registrations=[("tool_call", TOOLS)])
    started = time.perf_counter()
    with pytest.raises(MissingDurableHandler, match="nothing was read"):
        await runtime.execute(invocation(handler_id="nobody"))
    assert time.perf_counter() - started < 0.05


async def test_find_unregistered_reads_the_stored_record_and_starts_nothing(
    client: Client, counter: CountCalls, serve: Callable[..., Any], tmp_path: Path
) -> None:
    queue, calls = await serve()
    runtime = TemporalRuntime(client, task_queue=queue, registrations=[("tool_call", TOOLS)])
    stored = await runtime.execute(invocation())
    finder = TemporalRuntime(client, task_queue=queue, registrations=[], find_unregistered=True)
    counter.calls.clear()
    assert await finder.execute(stored.invocation) == stored
    assert "start" not in counter.calls and "describe" in counter.calls
    fresh = invocation()
    with pytest.raises(MissingDurableHandler, match="no record exists"):
        await finder.execute(fresh)
    assert not await exists(client, workflow_id_for(fresh))
    assert len(calls) == 1
    # with a record store, the record kept there is read without any Temporal call
    store = zincir.open_store(tmp_path / "records.db")
    try:
        keeping = TemporalRuntime(
            client, task_queue=queue, registrations=[("tool_call", TOOLS)], record_store=store
        )
        kept = await keeping.execute(invocation())
        local = TemporalRuntime(
            client, task_queue=queue, registrations=[], record_store=store, find_unregistered=True
        )
        counter.calls.clear()
        assert await local.execute(kept.invocation) == kept
        assert counter.calls == []
    finally:
        await store.close()


# -- the whole start request against 2 MiB ----------------------------------------------------


FILLER = base64.b64encode(random.Random(42).randbytes(2 * 1024 * 1024)).decode()


def filled(run_id: str, length: int) -> Invocation:
    return Invocation(
        run_id, "tool.call", 0, OperationKind.TOOL_CALL, TOOLS, json.dumps(FILLER[:length])
    )


async def request_size(runtime: TemporalRuntime, inv: Invocation) -> int:
    memo = {_MEMO_KEY: inv.stable_key(), _MEMO_DIGEST: inv.input_digest()}
    return await runtime._start_request_size(inv, runtime.workflow_id(inv), memo)


async def boundary(runtime: TemporalRuntime, run_id: str) -> int:
    """The longest filler whose start request fits (the next one's does not)."""
    low, high = 1_000_000, 2 * 1024 * 1024
    assert await request_size(runtime, filled(run_id, low)) <= MAX_START_REQUEST_BYTES
    assert await request_size(runtime, filled(run_id, high)) > MAX_START_REQUEST_BYTES
    while high - low > 1:
        middle = (low + high) // 2
        if await request_size(runtime, filled(run_id, middle)) <= MAX_START_REQUEST_BYTES:
            low = middle
        else:
            high = middle
    return low


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
async def test_a_start_request_over_2_mib_is_refused_before_it_is_sent(
    client: Client, counter: CountCalls, serve: Callable[..., Any], sealed: bool
) -> None:
    keys = Encryption({"k1": Encryption.generate_key()}, "k1") if sealed else None
    queue, calls = await serve(keys)
    runtime = TemporalRuntime(
        client,
        task_queue=queue,
        registrations=[("tool_call", TOOLS)],
        max_input_bytes=None,
        encryption=keys,
    )
    run_id = f"cap-{uuid.uuid4().hex}"
    fits = await boundary(runtime, run_id)
    over = filled(run_id, fits + 1)
    counter.calls.clear()
    with pytest.raises(InvalidInvocation, match="content_store=") as raised:
        await runtime.execute(over)
    assert raised.value.run_id == run_id
    assert str(MAX_START_REQUEST_BYTES) in str(raised.value)
    assert "start" not in counter.calls
    assert not await exists(client, workflow_id_for(over))
    # just under: sent and started (its record, which holds the input, is another matter:
    # without content_store= the default 1 MiB input cap keeps records within Temporal's)
    under = filled(run_id, fits)
    running = asyncio.create_task(runtime.execute(under))
    deadline = time.monotonic() + 30
    while not await exists(client, workflow_id_for(under)):
        assert time.monotonic() < deadline and not running.done()
        await asyncio.sleep(0.05)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await client.get_workflow_handle(workflow_id_for(under)).terminate()
    if sealed:  # sealing changes the size: the plain boundary is not the sealed one
        plain = TemporalRuntime(
            client, task_queue=queue, registrations=[("tool_call", TOOLS)], max_input_bytes=None
        )
        assert await boundary(plain, run_id) != fits
