"""A CommandHandler's span: LocalRuntime's operation span, emitted in the process that runs
the command and covering the subprocess's whole run; none for its replayed record."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from zincir.contract import Invocation, OperationKind, Success
from zincir.durable import CommandHandler, HandlerRegistry, LocalRuntime
from zincir.store import Store
from zincir.testing import capture_spans

pytest.importorskip("opentelemetry.sdk")

TOOLS = "otel-command"
# The program: its pid and the wall-clock nanoseconds at its start and its end.
PROGRAM = """
import json, os, sys, time
started = time.time_ns()
invocation = json.load(sys.stdin)
time.sleep(0.2)
print(json.dumps({"pid": os.getpid(), "started": started, "ended": time.time_ns()}))
"""


def tool_call() -> Invocation:
    call = {"tool_name": "convert", "tool_call_id": "call-9", "args": {"celsius": 20}}
    return Invocation(
        "otel-cmd", "tool.call", 0, OperationKind.TOOL_CALL, TOOLS, json.dumps({"call": call})
    )


async def test_a_command_handlers_run_is_one_span_around_the_subprocess(store: Store) -> None:
    registry = HandlerRegistry()
    registry.register(
        OperationKind.TOOL_CALL, TOOLS, CommandHandler([sys.executable, "-c", PROGRAM])
    )
    runtime = LocalRuntime(store, registry)
    with capture_spans() as captured:
        record = await runtime.execute(tool_call())
    assert isinstance(record.outcome, Success)
    program: dict[str, Any] = json.loads(record.outcome.output_json)
    assert program["pid"] != os.getpid()
    spans = [s for s in captured if s.attributes and s.attributes.get("zincir.handler_id") == TOOLS]
    [span] = spans
    assert span.name == "execute_tool convert"
    assert span.attributes is not None and span.attributes["gen_ai.tool.call.id"] == "call-9"
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time <= program["started"] < program["ended"] <= span.end_time

    # Executed again: the stored record, the program does not run, no span.
    with capture_spans() as again:
        assert await runtime.execute(tool_call()) == record
    assert [s for s in again if s.name.startswith("execute_tool")] == []
