"""One deployed version of a two-tool agent, run in its own process by test_deploy.py.

    agent_versions.py DB RUN VERSION LEDGER [hold]

VERSION is ``v1`` (the model calls ``first``, then ``second``, then answers) or a v2:
``add-tool`` (a third tool, ``audit``, called with ``first``) or ``namespace`` (the same
agent, its step ids under ``support.``). Each tool appends "tool NAME" to LEDGER first.
``hold`` makes the model report "holding" at its second request (after ``first`` ran) and
wait to be killed. Reports: "output TEXT", "divergence DETAILS" (exit 3), "drift" (exit 4).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from typing import Any

import zincir
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

HANDLERS = Handlers(model_request="versions-model", tool_call="versions-tools")
LEASE = timedelta(milliseconds=300)


def append(ledger: str, line: str) -> None:
    with open(ledger, "a") as side:
        side.write(line + "\n")
        side.flush()
        os.fsync(side.fileno())


def call(call_id: str, name: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(tool_call_id=call_id, tool_name=name, arguments=arguments)


def build(version: str, ledger: str, hold: bool) -> Agent:
    @tool
    async def first(n: int) -> dict[str, Any]:
        """The first tool."""
        append(ledger, "tool first")
        return {"first": n}

    @tool
    async def second(n: int) -> dict[str, Any]:
        """The second tool."""
        append(ledger, "tool second")
        return {"second": n}

    @tool
    async def audit(n: int) -> dict[str, Any]:
        """A tool v2 added."""
        append(ledger, "tool audit")
        return {"audit": n}

    async def model(request: ModelRequest) -> ModelResponse:
        turn = sum(message.role == "assistant" for message in request.messages)
        if hold and turn == 1:
            print("holding", flush=True)
            await asyncio.Event().wait()
        if turn == 0:
            calls = [call("c1", "first", n=1)]
            if version == "add-tool":
                calls.append(call("c2", "audit", n=1))
            return ModelResponse(parts=calls)
        if turn == 1:
            return ModelResponse(parts=[call("c3", "second", n=2)])
        return ModelResponse(parts=[TextPart(text="done")])

    tools = [first, second, audit] if version == "add-tool" else [first, second]
    return Agent(FunctionModel(model), name="versions", tools=tools)


async def main(db: str, run_id: str, version: str, ledger: str, hold: bool) -> int:
    agent = build(version, ledger, hold)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(db)
    namespace = "support" if version == "namespace" else None
    runtime = zincir.LocalRuntime(store, registry, claim_ttl=LEASE, poll_interval=0.02)
    binding = DurableBinding(runtime, run_id, HANDLERS, step_namespace=namespace, lease_ttl=LEASE)
    try:
        for _ in range(200):
            try:
                result = await agent.run("Use the tools.", durable=binding)
                break
            except zincir.LeaseHeld:  # a killed owner's lease has not expired yet
                await asyncio.sleep(0.05)
        else:
            raise SystemExit("the lease never expired")
    except zincir.VersionDivergence as error:
        print("divergence", json.dumps([error.position, error.recorded, error.attempted]))
        return 3
    except zincir.InputDrift as error:
        print("drift", error.detail)
        return 4
    finally:
        await store.close()
    print("output", result.output, flush=True)
    return 0


if __name__ == "__main__":
    db, run_id, version, ledger, *rest = sys.argv[1:]
    sys.exit(asyncio.run(main(db, run_id, version, ledger, rest == ["hold"])))
