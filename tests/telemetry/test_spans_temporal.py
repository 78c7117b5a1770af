"""OpenTelemetry on Temporal: the worker's activity emits one span per real execution of a
handler, none when a start attaches to a finished workflow or a stored record answers, and
parents it on the run's stored trace (a worker with a store) or on the current context."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from tests.integration.temporal_server import TemporalServer
from tests.telemetry.test_spans import as_dicts, of_kind
from zincir.contract import Invocation, OperationKind, Success
from zincir.durable import HandlerRegistry
from zincir.store import Store
from zincir.testing import capture_spans

pytest.importorskip("opentelemetry.sdk")
try:
    from temporalio.client import Client

    from zincir.temporal import TemporalRuntime, Worker
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

TOOLS = "otel-tools"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


class Lookup:
    """A tool-call handler that counts its real executions."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, invocation: Invocation, request: Any) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(0.05)
        return {"city": request["call"]["args"]["city"], "celsius": 20}


def tool_call(run_id: str) -> Invocation:
    call = {"tool_name": "lookup", "tool_call_id": "call-1", "args": {"city": "Oslo"}}
    return Invocation(
        run_id, "tool.call", 0, OperationKind.TOOL_CALL, TOOLS, json.dumps({"call": call})
    )


@pytest.fixture
async def client(temporal_server: TemporalServer) -> Client:
    return await Client.connect(temporal_server.address, namespace=temporal_server.namespace)


@asynccontextmanager
async def serving(
    client: Client, handler: Lookup, *, store: Store | None = None
) -> AsyncIterator[TemporalRuntime]:
    """A worker of a fresh task queue running ``handler``, and a runtime sending to it."""
    queue = f"otel-{uuid.uuid4().hex}"
    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, TOOLS, handler)
    runtime = TemporalRuntime(client, task_queue=queue, registrations=registry, record_store=store)
    async with Worker(client, registry, queue, content_store=store):
        yield runtime


@contextmanager
def tools_spans() -> Iterator[list[dict[str, Any]]]:
    """The ``execute_tool`` spans that end in the block, as dicts (filled at its exit)."""
    found: list[dict[str, Any]] = []
    with capture_spans() as captured:
        yield found
    found.extend(of_kind(as_dicts(captured), "execute_tool"))


async def test_an_execution_on_temporal_has_one_span_and_attaching_to_it_none(
    client: Client,
) -> None:
    handler = Lookup()
    invocation = tool_call(f"otel-{uuid.uuid4().hex}")
    async with serving(client, handler) as runtime:
        with tools_spans() as spans:
            record = await runtime.execute(invocation)
        assert isinstance(record.outcome, Success) and handler.calls == 1
        [span] = spans
        assert span["name"] == "execute_tool lookup"
        attributes = span["attributes"]
        assert attributes["gen_ai.tool.name"] == "lookup"
        assert attributes["gen_ai.tool.call.id"] == "call-1"
        assert attributes["zincir.run_id"] == invocation.run_id
        assert attributes["zincir.handler_id"] == TOOLS
        assert "error.type" not in attributes

        # The same invocation again: the start attaches to the completed workflow (a
        # replay of its record), and duplicates racing a first start share its one run.
        with tools_spans() as again:
            assert (await runtime.execute(invocation)) == record
        assert again == [] and handler.calls == 1
        racing = tool_call(f"otel-{uuid.uuid4().hex}")
        with tools_spans() as raced:
            records = await asyncio.gather(*(runtime.execute(racing) for _ in range(4)))
        assert len(set(records)) == 1 and handler.calls == 2
        assert [s["attributes"]["zincir.run_id"] for s in raced] == [racing.run_id]


async def test_a_worker_with_a_store_parents_the_span_on_the_runs_trace(
    client: Client, store: Store
) -> None:
    handler = Lookup()
    invocation = tool_call(f"otel-{uuid.uuid4().hex}")
    await store.save_trace_context(invocation.run_id, f"00-{TRACE_ID}-{SPAN_ID}-01")
    async with serving(client, handler, store=store) as runtime:
        with tools_spans() as spans:
            record = await runtime.execute(invocation)
        [span] = spans
        assert (span["trace_id"], span["parent_id"]) == (TRACE_ID, SPAN_ID)

        # A stored record answers: nothing executes, no span.
        with tools_spans() as again:
            assert (await runtime.execute(invocation)) == record
        assert again == [] and handler.calls == 1


async def test_without_a_store_the_tracing_interceptor_carries_the_callers_trace(
    temporal_server: TemporalServer,
) -> None:
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import TracingInterceptor

    handler = Lookup()
    invocation = tool_call(f"otel-{uuid.uuid4().hex}")
    with capture_spans() as captured:
        traced = await Client.connect(
            temporal_server.address,
            namespace=temporal_server.namespace,
            interceptors=[TracingInterceptor()],
        )
        async with serving(traced, handler) as runtime:
            with trace.get_tracer("caller").start_as_current_span("caller") as caller:
                await runtime.execute(invocation)
    spans = as_dicts(captured)
    [span] = of_kind(spans, "execute_tool")
    assert span["trace_id"] == f"{caller.get_span_context().trace_id:032x}"
    [activity] = [s for s in spans if s["span_id"] == span["parent_id"]]
    assert activity["name"].startswith("RunActivity:")
