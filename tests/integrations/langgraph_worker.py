"""LangGraph graphs checkpointed by ZincirSaver, run in child processes by the crash tests.

    python langgraph_worker.py order  DB FOLDER THREAD [--block-in EFFECT] [--saver S]
    python langgraph_worker.py resume DB FOLDER THREAD [--saver S]
    python langgraph_worker.py answer DB FOLDER THREAD ANSWER [--saver S]
    python langgraph_worker.py steps  DB FOLDER THREAD STEPS [--go FILE] [--asyncio]

``order`` starts the order graph: plan, one ``charge`` per item, ``ship`` and ``email`` in
one super-step, an ``approve`` node that interrupts for a person's answer, ``finish``. Each
effect is appended to ``FOLDER/ledger`` as ``<task id> <effect>`` unless its task id is
already there (fsynced), and every node entry to ``FOLDER/attempts``. With ``--block-in``
the node whose effect starts with EFFECT prints ``inside <task id>`` after its effect and
waits, to be killed. ``resume`` continues the thread from its checkpoints (to the
interrupt); ``answer`` resumes the interrupt with ``Command(resume=ANSWER)``. Each prints
one JSON line.

``steps`` runs a ring of three nodes for STEPS super-steps on a thread, after ``--go``
exists, with ``AsyncZincirSaver`` under ``--asyncio``. ``--saver sqlite`` swaps in
LangGraph's own SqliteSaver (langgraph-checkpoint-sqlite), the reference the expectations
were checked against.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

ITEMS = ["apple", "pear", "plum", "fig"]
RING = ("a", "b", "c")
BLOCK_TIMEOUT_S = 60.0


def _append(path: Path, line: str) -> None:
    with path.open("a") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def ledger_lines(folder: Path) -> list[tuple[str, str]]:
    """The ledger as (key, effect) pairs, in the order they were written."""
    ledger = folder / "ledger"
    if not ledger.exists():
        return []
    return [
        (key, effect)
        for key, _, effect in (line.partition(" ") for line in ledger.read_text().splitlines())
    ]


def attempt_lines(folder: Path) -> list[tuple[str, str]]:
    """Every node entry as (task id, node name)."""
    attempts = folder / "attempts"
    if not attempts.exists():
        return []
    return [
        (task, node)
        for task, _, node in (line.partition(" ") for line in attempts.read_text().splitlines())
    ]


def _concat(left: list[str], right: list[str]) -> list[str]:
    return left + right


class Order(TypedDict, total=False):
    items: list[str]
    charged: Annotated[list[str], _concat]
    shipped: bool
    emailed: bool
    decision: str
    status: str


class Tool:
    """The side effects of the order graph: an idempotent ledger keyed by task id."""

    def __init__(self, folder: Path, block_in: str | None) -> None:
        self.folder = folder
        self.block_in = block_in

    def enter(self, runtime: Runtime[None], node: str) -> str:
        assert runtime.execution_info is not None
        task = runtime.execution_info.task_id
        _append(self.folder / "attempts", f"{task} {node}")
        return task

    def effect(self, task: str, effect: str) -> None:
        if task not in {key for key, _ in ledger_lines(self.folder)}:
            _append(self.folder / "ledger", f"{task} {effect}")
        if self.block_in is not None and effect.startswith(self.block_in):
            sys.stdout.write(f"inside {task}\n")
            sys.stdout.flush()
            deadline = time.monotonic() + BLOCK_TIMEOUT_S
            while not (self.folder / "release").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nobody killed the worker blocked in {effect!r}")
                time.sleep(0.02)


def order_graph(tool: Tool) -> StateGraph[Order, None, Order, Order]:
    """The order graph, not compiled."""

    def plan(state: Order, runtime: Runtime[None]) -> Order:
        tool.enter(runtime, "plan")
        return {"items": list(state["items"]), "charged": [], "status": "planned"}

    def charge(state: Order, runtime: Runtime[None]) -> Order:
        task = tool.enter(runtime, "charge")
        item = state["items"][len(state["charged"])]
        tool.effect(task, f"charge {item}")
        return {"charged": [item]}

    def after_charge(state: Order) -> str | list[str]:
        return "charge" if len(state["charged"]) < len(state["items"]) else ["ship", "email"]

    def ship(state: Order, runtime: Runtime[None]) -> Order:
        task = tool.enter(runtime, "ship")
        tool.effect(task, f"ship {'+'.join(state['charged'])}")
        return {"shipped": True}

    def email(state: Order, runtime: Runtime[None]) -> Order:
        task = tool.enter(runtime, "email")
        tool.effect(task, f"email {len(state['charged'])} items")
        return {"emailed": True}

    def approve(state: Order, runtime: Runtime[None]) -> Order:
        tool.enter(runtime, "approve")
        answer = interrupt({"question": "close the order?", "charged": state["charged"]})
        return {"decision": str(answer)}

    def finish(state: Order, runtime: Runtime[None]) -> Order:
        task = tool.enter(runtime, "finish")
        tool.effect(task, f"close {state['decision']}")
        return {"status": "closed"}

    builder = StateGraph(Order)
    builder.add_node("plan", plan)
    builder.add_node("charge", charge)
    builder.add_node("ship", ship)
    builder.add_node("email", email)
    builder.add_node("approve", approve)
    builder.add_node("finish", finish)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "charge")
    builder.add_conditional_edges("charge", after_charge, ["charge", "ship", "email"])
    builder.add_edge(["ship", "email"], "approve")
    builder.add_edge("approve", "finish")
    builder.add_edge("finish", END)
    return builder


class Ring(TypedDict):
    n: int
    last: str


def ring_graph(steps: int) -> StateGraph[Ring, None, Ring, Ring]:
    """Nodes a → b → c → a … each adding one to ``n``, until ``n == steps``."""
    builder = StateGraph(Ring)
    for index, name in enumerate(RING):

        def node(state: Ring, name: str = name) -> Ring:
            return {"n": state["n"] + 1, "last": name}

        following = RING[(index + 1) % len(RING)]

        def route(state: Ring, following: str = following) -> str:
            return following if state["n"] < steps else END

        builder.add_node(name, node)
        builder.add_conditional_edges(name, route, [following, END])
    builder.add_edge(START, RING[0])
    return builder


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 10_000}


@contextmanager
def saver(kind: str, db: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(db) as sqlite_saver:
            yield sqlite_saver
    else:
        from zincir.integrations.langgraph import ZincirSaver

        with ZincirSaver.from_conn_string(db) as zincir_saver:
            yield zincir_saver


def interrupts(result: dict[str, Any]) -> list[Any]:
    return [item.value for item in result.get("__interrupt__", [])]


def run_order(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(args.folder)
    with saver(args.saver, args.db) as checkpointer:
        graph = order_graph(Tool(folder, args.block_in)).compile(checkpointer=checkpointer)
        cfg = config(args.thread)
        if args.mode == "order":
            result = graph.invoke({"items": ITEMS}, cfg, durability="sync")
        elif args.mode == "resume":
            result = graph.invoke(None, cfg, durability="sync")
        else:
            result = graph.invoke(Command(resume=args.answer), cfg, durability="sync")
        state = graph.get_state(cfg)
        values = {k: v for k, v in result.items() if k != "__interrupt__"}
        return {"values": values, "interrupts": interrupts(result), "next": list(state.next)}


def wait_for(go: str | None) -> None:
    """Say ``ready`` and wait for the file ``go``, so that all the workers write at once."""
    if go is None:
        return
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    deadline = time.monotonic() + BLOCK_TIMEOUT_S
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} never appeared")
        time.sleep(0.005)


def run_steps(args: argparse.Namespace) -> dict[str, Any]:
    builder = ring_graph(args.steps)
    if args.asyncio:
        from zincir.integrations.langgraph import AsyncZincirSaver

        async def main() -> dict[str, Any]:
            async with AsyncZincirSaver.from_conn_string(args.db) as checkpointer:
                graph = builder.compile(checkpointer=checkpointer)
                wait_for(args.go)
                result = await graph.ainvoke(
                    {"n": 0, "last": ""}, config(args.thread), durability="sync"
                )
                return dict(result)

        return asyncio.run(main())
    with saver(args.saver, args.db) as checkpointer:
        graph = builder.compile(checkpointer=checkpointer)
        wait_for(args.go)
        return dict(graph.invoke({"n": 0, "last": ""}, config(args.thread), durability="sync"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["order", "resume", "answer", "steps"])
    parser.add_argument("db")
    parser.add_argument("folder")
    parser.add_argument("thread")
    parser.add_argument("extra", nargs="?")
    parser.add_argument("--block-in")
    parser.add_argument("--go")
    parser.add_argument("--asyncio", action="store_true")
    parser.add_argument("--saver", choices=["zincir", "sqlite"], default="zincir")
    args = parser.parse_args(argv)
    if args.mode == "steps":
        args.steps = int(args.extra)
        output = run_steps(args)
    else:
        args.answer = args.extra
        output = run_order(args)
    sys.stdout.write(json.dumps(output) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
