"""A workflow process for the crash tests; the tests SIGKILL it at the points it reports.

    workflow_child.py steps DB RUN SIDE_FILE MODE [ahead]
                                            MODE: in:K | after:K | resume | recover
                                            ahead: each step claims the next (next=)
    workflow_child.py sleep DB RUN SECONDS
    workflow_child.py send DB RUN TO_RUN (block|exit)
    workflow_child.py recv DB RUN (block|exit)
    workflow_child.py abandon DB PREFIX COUNT TTL_SECONDS

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL. Each line on
stdout is a report the test waits for; "block" then waits to be killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

import zincir
from zincir.store import Store
from zincir.workflow import WorkflowContext

LEASE = timedelta(milliseconds=300)
STEPS = [f"s{i}" for i in range(1, 6)]


def report(*parts: Any) -> None:
    print(*parts, flush=True)


async def block() -> None:
    await asyncio.Event().wait()


async def open_when_free(store: Store, run_id: str) -> WorkflowContext:
    """Open the run, waiting for a dead owner's lease to expire."""
    for _ in range(200):
        try:
            return await WorkflowContext.open(store, run_id, lease_ttl=LEASE)
        except zincir.LeaseHeld:
            await asyncio.sleep(0.05)
    raise SystemExit("the lease never expired")


async def steps(store: Store, run_id: str, side_file: str, mode: str, ahead: bool = False) -> None:
    kind, _, number = mode.partition(":")
    wf = await open_when_free(store, run_id)
    if kind == "recover":
        report("recovered", json.dumps(await wf.recover()))
    results = []
    for index, name in enumerate(STEPS):
        following = STEPS[index + 1] if ahead and index + 1 < len(STEPS) else None

        async def body(name: str = name) -> str:
            with open(side_file, "a") as side:
                side.write(name + "\n")
            if kind == "in" and name == f"s{number}":
                report("blocked in", name)
                await block()
            return name.upper()

        try:
            results.append(await wf.step(name, body, next=following))
        except zincir.StepInProgress:
            report("in progress", name)
            await wf.close()
            return
        if kind == "after" and name == f"s{number}":
            report("after", name)
            await block()
    await wf.complete(results)
    report("completed", json.dumps(results))


async def sleep(store: Store, run_id: str, seconds: float) -> None:
    async def sleeper(delay: float) -> None:
        report("sleeping", delay)
        await asyncio.sleep(delay)

    wf = await WorkflowContext.open(store, run_id, lease_ttl=LEASE, sleeper=sleeper)
    await wf.sleep("nap", seconds)
    report("woke")
    await wf.close()


async def send(store: Store, run_id: str, to_run: str, then: str) -> None:
    wf = await open_when_free(store, run_id)
    ids = [await wf.send(to_run, "job", {"n": n}) for n in (1, 2)]
    report("sent", json.dumps(ids))
    if then == "block":
        await block()
    await wf.close()


async def recv(store: Store, run_id: str, then: str) -> None:
    wf = await open_when_free(store, run_id)
    message = await wf.recv_message("job", timeout=10)
    assert message is not None
    report("received", json.dumps([message.id, message.payload]))
    if then == "block":
        await block()
    await wf.close()


async def abandon(store: Store, prefix: str, count: int, ttl: float) -> None:
    async def one(i: int) -> zincir.AgentContext:
        ctx = await zincir.AgentContext.create(
            store, name="abandoned", run_id=f"{prefix}{i:04d}", lease_ttl=ttl
        )
        await ctx.record_response(f"work {i}", [])
        return ctx

    contexts = await asyncio.gather(*(one(i) for i in range(count)))
    report("ready", len(contexts))
    await block()


async def main(argv: list[str]) -> None:
    command, db = argv[0], argv[1]
    store = zincir.open_store(db)
    try:
        if command == "steps":
            await steps(store, argv[2], argv[3], argv[4], argv[5:] == ["ahead"])
        elif command == "sleep":
            await sleep(store, argv[2], float(argv[3]))
        elif command == "send":
            await send(store, argv[2], argv[3], argv[4])
        elif command == "recv":
            await recv(store, argv[2], argv[3])
        elif command == "abandon":
            await abandon(store, argv[2], int(argv[3]), float(argv[4]))
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
