"""A LangGraph graph whose two parallel nodes run the same zincir agent (crash tests).

``python graph_nodes_worker.py DB BASE_URL THREAD EFFECTS`` runs (or, when the thread has a
checkpoint, resumes) the graph on AsyncZincirSaver and prints its final state as JSON. The
agent's model is the real ``openai`` SDK against ``BASE_URL`` (tests/integrations'
``GraphServer``); its tools append to ``EFFECTS``. With ``$GRAPH_HOLD`` set, the ``hold``
tool prints ``inside <text>`` and sleeps until the process is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from zincir.agent import Agent, OpenAIChatModel, Runner, tool

HOLD_ENV = "GRAPH_HOLD"
EFFECTS_ENV = "GRAPH_EFFECTS"


def _effect(line: str) -> None:
    with open(os.environ[EFFECTS_ENV], "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


@tool
async def charge(text: str) -> str:
    """Charge for an order."""
    _effect(f"charge {text}")
    return f"charged {text}"


@tool
async def hold(text: str) -> str:
    """Hold an order."""
    _effect(f"hold {text}")
    if os.environ.get(HOLD_ENV):
        sys.stdout.write(f"inside {text}\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)
    return f"held {text}"


class State(TypedDict, total=False):
    a: str
    b: str


def build(runner: Runner, agent: Agent) -> StateGraph[Any]:
    """Nodes ``a`` and ``b``, run in one super-step, each running ``agent`` on its prompt."""

    async def node_a(state: State) -> State:
        return {"a": (await runner.run(agent, "apple")).output}

    async def node_b(state: State) -> State:
        return {"b": (await runner.run(agent, "pear")).output}

    builder = StateGraph(State)
    builder.add_node("a", node_a)
    builder.add_node("b", node_b)
    builder.add_edge(START, "a")
    builder.add_edge(START, "b")
    builder.add_edge("a", END)
    builder.add_edge("b", END)
    return builder


async def main(db: str, base_url: str, thread: str, effects: str) -> None:
    import openai

    from zincir.integrations.langgraph import AsyncZincirSaver

    os.environ[EFFECTS_ENV] = effects
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test-0123456789", max_retries=0)
    agent = Agent(OpenAIChatModel("gpt-test", client), name="clerk", tools=[charge, hold])
    config: Any = {"configurable": {"thread_id": thread}}
    async with Runner(db, [agent], lease_ttl=timedelta(seconds=2)) as runner:
        async with AsyncZincirSaver.from_conn_string(db) as saver:
            graph = build(runner, agent).compile(checkpointer=saver)
            started = await saver.aget_tuple(config) is not None
            state = await graph.ainvoke(None if started else {}, config)
    await client.close()
    print(json.dumps(dict(state)), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    asyncio.run(main(*sys.argv[1:5]))
