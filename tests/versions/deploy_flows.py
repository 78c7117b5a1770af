"""Versions of one four-step workflow, as ResumeWorker handlers and as a starter process.

Handlers (``module:function`` for ``zincir worker`` and ``zincir check-compat``): ``v1``
(fetch, price, notify, archive), ``rename`` (price → quote), ``reorder`` (price before
fetch), ``remove`` (no price), and ``by_version``, which runs the plan of
``$ZINCIR_APP_VERSION`` (v1, or v2 = rename). Every step body first appends
"RUN STEP VERSION" to the file ``$ZINCIR_LEDGER``: the external effect the tests count.
``agent_v1``, ``agent_namespace`` and ``agent_add_tool`` resume the two-tool agent of
``agent_versions.py`` in its versions (its tools append to the same ledger).

    deploy_flows.py DB RUN VERSION K

starts run RUN on app version VERSION with the v1 plan, reports "holding" after its K-th step
(K=0: before any) and waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta

import zincir
from tests.versions.agent_versions import HANDLERS, build
from zincir import AgentContext, WorkflowContext
from zincir.agent import DurableBinding, serve

PLANS = {
    "v1": ["fetch", "price", "notify", "archive"],
    "v2": ["fetch", "quote", "notify", "archive"],
    "rename": ["fetch", "quote", "notify", "archive"],
    "reorder": ["price", "fetch", "notify", "archive"],
    "remove": ["fetch", "notify", "archive"],
}


def effect(run_id: str, name: str) -> Callable[[], Awaitable[str]]:
    async def body() -> str:
        version = os.environ.get("ZINCIR_APP_VERSION", "-")
        with open(os.environ["ZINCIR_LEDGER"], "a") as ledger:
            ledger.write(f"{run_id} {name} {version}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return name.upper()

    return body


async def run_plan(ctx: AgentContext, plan: str) -> None:
    wf = WorkflowContext.from_agent(ctx)
    results = [await wf.step(name, effect(ctx.run_id, name)) for name in PLANS[plan]]
    await wf.complete(results)


async def v1(ctx: AgentContext) -> None:
    await run_plan(ctx, "v1")


async def rename(ctx: AgentContext) -> None:
    await run_plan(ctx, "rename")


async def reorder(ctx: AgentContext) -> None:
    await run_plan(ctx, "reorder")


async def remove(ctx: AgentContext) -> None:
    await run_plan(ctx, "remove")


async def by_version(ctx: AgentContext) -> None:
    await run_plan(ctx, os.environ["ZINCIR_APP_VERSION"])


def resume_agent(version: str) -> Callable[[AgentContext], Awaitable[None]]:
    async def handler(ctx: AgentContext) -> None:
        agent = build(version, os.environ["ZINCIR_LEDGER"], hold=False)
        registry = zincir.HandlerRegistry()
        serve(registry, agent, HANDLERS)
        runtime = zincir.LocalRuntime(ctx.store, registry)
        namespace = "support" if version == "namespace" else None
        binding = DurableBinding(runtime, ctx.run_id, HANDLERS, step_namespace=namespace)
        await agent.run("Use the tools.", durable=binding)

    return handler


agent_v1 = resume_agent("v1")
agent_namespace = resume_agent("namespace")
agent_add_tool = resume_agent("add-tool")


async def start(db: str, run_id: str, version: str, hold: int) -> None:
    store = zincir.open_store(db)
    wf = await WorkflowContext.open(
        store, run_id, lease_ttl=timedelta(milliseconds=300), app_version=version
    )
    for done, name in enumerate(PLANS["v1"]):
        if done == hold:
            break
        await wf.step(name, effect(run_id, name))
    print("holding", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    db, run_id, version, hold = sys.argv[1:]
    asyncio.run(start(db, run_id, version, int(hold)))
