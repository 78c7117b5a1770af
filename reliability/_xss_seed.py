"""Store XSS payloads through zincir's public API into every field the inspector shows.

Payloads are split into groups; each group gets an agent run (name, provider, app version,
config, responses, tool names, arguments and results, a pending intent, checkpoints and
their evidence, the failure text), a workflow run (step names and results, a timer,
messages, a child run), a run of durable operations (model request and response documents
the conversation view renders, failures, suspensions), restart checkpoints and a LangGraph
thread (its id and metadata). Fields that must be ids get the payload with its control
characters replaced, cut to fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import zincir
from zincir import (
    AgentContext,
    HandlerRegistry,
    Invocation,
    LocalRuntime,
    OperationFailed,
    OperationKind,
    RetryPolicy,
    Suspend,
    ToolCall,
    Verification,
    WorkflowContext,
    send_message,
)
from zincir.contract import payloads as docs
from zincir.restart import SQLRestartStore

__all__ = ["CORPUS", "Seeded", "as_id", "load_corpus", "seed"]

CORPUS = Path(__file__).resolve().parent / "data" / "xss_corpus.txt"


def load_corpus() -> list[str]:
    """The payloads of the corpus file (one JSON string a line after ``#`` comments)."""
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line and not line.startswith("#")]


def as_id(text: str, suffix: str = "", limit: int = 200) -> str:
    """``text`` fit for an id or name: control characters as spaces, at most ``limit`` bytes."""
    cleaned = "".join(char if char.isprintable() else " " for char in text).strip() or "x"
    data = cleaned.encode("utf-8")[:limit].decode("utf-8", "ignore")
    return data + suffix


@dataclass
class Seeded:
    """The run and thread ids the seeding made, for the pages to render."""

    runs: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)
    """Per run or thread id, text its page must show (the head of its group's first payload)."""


async def _reject(payloads: list[str]) -> Verification:
    return Verification(False, {"reason": payloads, **{as_id(p): p for p in payloads}})


async def _agent_run(store: zincir.SQLiteStore, group: list[str], tag: str) -> list[str]:
    first = group[0]
    ctx = await AgentContext.create(
        store,
        name=as_id(first),
        provider=as_id(first, limit=100),
        run_id=as_id(first, f" #{tag}"),
        config={"payloads": group, **{as_id(p, limit=100): p for p in group}},
        lease_ttl=timedelta(hours=1),
        app_version=as_id(first, limit=60),
    )
    for index, payload in enumerate(group):
        call_id = as_id(payload, f" #{tag}.{index}")
        await ctx.record_response(
            payload,
            [ToolCall(call_id, as_id(payload, limit=120), {"payload": payload, "html": payload})],
            as_id(payload, limit=60),
        )
        if index % 3 != 2:  # every third intent stays pending
            await ctx.record_tool_result(call_id, {"result": payload}, is_error=index % 2 == 0)
    candidate = {
        "completed": group,
        "remaining": group[:3],
        "artifacts": group[:3],
        "failed_attempts": group[:3],
        "evidence": {as_id(p, limit=100): p for p in group},
    }
    await ctx.checkpoint(candidate, lambda c: _reject(group))
    child = await AgentContext.create(
        store, name=as_id(first, limit=80), config={"payload": first}, parent_id=ctx.run_id
    )
    await child.complete({"result": group})
    await ctx.fail("\n".join(group))
    return [ctx.run_id, child.run_id]


async def _workflow_run(store: zincir.SQLiteStore, group: list[str], tag: str) -> list[str]:
    run_id = as_id(group[0], f" #{tag}.workflow")
    wf = await WorkflowContext.open(store, run_id, name=as_id(group[0]), config={"payloads": group})
    try:
        for index, payload in enumerate(group):
            await wf.step(as_id(payload, f" #{index}"), lambda p=payload: {"result": p})
        await wf.sleep(as_id(group[0], " timer"), timedelta(milliseconds=1))
        topic = as_id(group[-1], limit=100)
        await wf.send(run_id, topic, {"payloads": group})
        await wf.recv(topic, timedelta(seconds=5))
        child = await wf.spawn(
            as_id(group[0], " spawn", limit=100), {"payloads": group}, run_name=as_id(group[-1])
        )
    finally:
        await wf.close()
    await send_message(store, run_id, as_id(group[0], limit=100), {"payloads": group})
    return [run_id, child]


async def _operations_run(store: zincir.SQLiteStore, group: list[str], tag: str) -> str:
    run_id = as_id(group[0], f" #{tag}.operations")
    ctx = await AgentContext.create(store, name=as_id(group[0]), run_id=run_id)
    handler_id = as_id(group[0], limit=100)
    registry = HandlerRegistry()

    async def model(invocation: Invocation, request: Any) -> Any:
        text = "\n".join(group)
        call = docs.ToolCallPart(tool_call_id="c", tool_name=handler_id, arguments={"p": text})
        response = docs.ModelResponse(
            parts=[docs.TextPart(text=text), call], model_name=handler_id, finish_reason=text
        )
        return response.to_dict()

    async def tool(invocation: Invocation, request: Any) -> Any:
        if request.get("fail"):
            raise OperationFailed(as_id(group[0], limit=100), False, "\n".join(group))
        raise Suspend("approval", {"payloads": group})

    registry.register(OperationKind.MODEL_REQUEST, handler_id, model)
    registry.register(OperationKind.TOOL_CALL, handler_id, tool)
    runtime = LocalRuntime(store, registry, RetryPolicy.no_retry())
    message = docs.Message(role="user", parts=[docs.TextPart(text=p) for p in group])
    system = docs.Message(role="system", parts=[docs.TextPart(text=group[0])])
    request = docs.ModelRequest(
        model=handler_id,
        messages=[system, message],
        tools=[docs.ToolDefinition(name=as_id(p, limit=100), description=p) for p in group[:5]],
    )
    step = as_id(group[-1], limit=100)
    await runtime.execute(
        Invocation(run_id, step, 0, "model_request", handler_id, request.to_json())
    )
    await runtime.execute(Invocation(run_id, step, 1, "tool_call", handler_id, '{"fail":true}'))
    await runtime.execute(Invocation(run_id, step, 2, "tool_call", handler_id, "{}"))
    restart = SQLRestartStore(store)
    for index, payload in enumerate(group[:5]):
        await restart.save(run_id, as_id(payload, f" #{index}"), 1, {"payload": payload})
    await ctx.close()
    return run_id


async def _thread(store: zincir.SQLiteStore, group: list[str], tag: str) -> str | None:
    """A LangGraph thread whose id and metadata hold the payloads (None without LangGraph)."""
    try:
        from langgraph.checkpoint.base import empty_checkpoint

        from zincir.integrations.langgraph import AsyncZincirSaver
    except ImportError:
        return None
    thread_id = as_id(group[0], f" #{tag}.thread")
    saver = AsyncZincirSaver(store)
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step, payload in enumerate(group[:5]):
        checkpoint: Any = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [payload], "note": payload}
        metadata: Any = {"source": "loop", "step": step, "writes": {"node": payload}}
        config = await saver.aput(config, checkpoint, metadata, {})
    await saver.aput_writes(config, [("messages", group[0])], as_id(group[0], limit=60))
    return thread_id


async def seed(store: zincir.SQLiteStore, groups: list[list[str]]) -> Seeded:
    """Every group stored in every kind of run; returns what to render."""
    seeded = Seeded()
    for index, group in enumerate(groups):
        tag = str(index)
        runs = await _agent_run(store, group, tag)
        runs += await _workflow_run(store, group, tag)
        runs.append(await _operations_run(store, group, tag))
        thread = await _thread(store, group, tag)
        threads = [] if thread is None else [thread]
        probe = " ".join(as_id(group[0]).split())[:30]
        seeded.probes.update({item: probe for item in [*runs, *threads]})
        seeded.runs += runs
        seeded.threads += threads
    return seeded
