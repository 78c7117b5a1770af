"""The same long-horizon agent on a peer, run as one process of a run in the peers' venv.

    .venv-peers/bin/python -m benchmarks.recovery.peers SYSTEM CONFIG_JSON
    SYSTEM: langgraph | dbos

The task, the world (ledger, artifacts, meter, scripted model, kill points) and the loop's
rules are those of benchmarks/recovery/agent.py; only where progress is kept changes:

- **langgraph**: a graph of four nodes (model, tool, checkpoint, back to the model) on
  ``SqliteSaver`` with ``durability="sync"``, the context as the graph's state. A restart
  invokes the thread again from its last checkpoint, re-running the node that was killed.
  With the fresh strategy an accepted claim replaces the state's messages with the summary.
- **dbos**: one workflow whose model requests, tool calls and verifications are steps, on a
  SQLite system database. A restart launches DBOS, which recovers the pending workflow: it
  runs again from the top, each finished step answered from its recorded output.

The kill point ``recorded`` is where the result is stored: after the step that ran the tool
returned (DBOS), or when the node after the tool node starts (LangGraph, whose checkpoint of
the tool node's output is written between the two).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from typing import Any, TypedDict

from .world import (
    Artifacts,
    KillSwitch,
    Ledger,
    Meter,
    ScriptedModel,
    Task,
    audit_claim,
    do_subtask,
    last_tool_index,
    system_message,
)

THREAD = "recovery-run"


class Peer:
    """The world of one process and the steps every peer's loop is made of."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.task = Task(config["subtasks"], config["every"], config["liar"])
        self.context = config["context"]
        self.verify_artifacts = bool(config["verify"])
        self.ledger = Ledger(config["ledger"])
        self.artifacts = Artifacts(config["artifacts"])
        self.meter = Meter(config["meter"])
        self.kill = KillSwitch()
        self.model = ScriptedModel(self.task, self.meter)

    def respond(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        response = self.model.respond(messages)
        if "tool_call" in response:
            self.kill.point(response["tool_call"]["index"], "responded")
        return response

    def run_tool(self, call: dict[str, Any]) -> dict[str, Any]:
        return do_subtask(self.ledger, self.artifacts, self.kill, call["id"], call["index"])

    def verify(self, claim: list[int], last_index: int) -> tuple[bool, Any]:
        if self.verify_artifacts:
            passed, evidence = self.artifacts.verify(claim)
        else:
            passed, evidence = True, {"checked": 0}
        false = audit_claim(self.ledger, claim)
        self.meter.write("audit", claimed=len(claim), false=false, accepted=passed)
        self.kill.point(last_index, "verified")
        return passed, evidence

    def after_decision(
        self, messages: list[dict[str, Any]], claim: list[int], accepted: bool, evidence: Any
    ) -> list[dict[str, Any]]:
        """The context after a checkpoint decision (reset to the summary when fresh)."""
        if accepted and self.context == "fresh":
            return [system_message(self.task), {"role": "summary", "completed": claim}]
        decision = {"role": "checkpoint", "accepted": accepted, "completed": claim}
        return [*messages, {**decision, "evidence": evidence}]

    def close(self) -> None:
        self.ledger.close()
        self.meter.close()


class AgentState(TypedDict):
    """LangGraph's state: the model's context."""

    messages: list[dict[str, Any]]


def run_langgraph(peer: Peer) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    def model(state: AgentState) -> AgentState:
        messages = state["messages"]
        last = messages[-1]
        if last["role"] == "tool":  # the tool node's output is checkpointed by now
            peer.kill.point(last["index"], "recorded")
        return {"messages": [*messages, {"role": "assistant", **peer.respond(messages)}]}

    def tool(state: AgentState) -> AgentState:
        messages = state["messages"]
        call = messages[-1]["tool_call"]
        result = peer.run_tool(call)
        message = {"role": "tool", "id": call["id"], "index": call["index"], "result": result}
        return {"messages": [*messages, message]}

    def checkpoint(state: AgentState) -> AgentState:
        messages = state["messages"]
        claim = list(messages[-1]["claim"])
        accepted, evidence = peer.verify(claim, last_tool_index(messages))
        return {"messages": peer.after_decision(messages, claim, accepted, evidence)}

    def route(state: AgentState) -> str:
        last = state["messages"][-1]
        if last["role"] == "assistant":
            if "tool_call" in last:
                return "tool"
            if "claim" in last:
                return "checkpoint"
            return END
        return "model"

    peer.meter.write("ready")  # imports done: the rest of the restart is LangGraph's
    builder = StateGraph(AgentState)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_node("checkpoint", checkpoint)
    builder.add_edge(START, "model")
    for name in ("model", "tool", "checkpoint"):
        builder.add_conditional_edges(name, route, ["model", "tool", "checkpoint", END])
    with SqliteSaver.from_conn_string(peer.config["db"]) as saver:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": THREAD}, "recursion_limit": 100_000}
        started = saver.get_tuple(config) is not None
        first = None if started else {"messages": [system_message(peer.task)]}
        graph.invoke(first, config, durability="sync")
    peer.meter.write("final")


def run_dbos(peer: Peer) -> None:
    path = peer.config["db"]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")  # DBOS leaves the rollback journal otherwise
    conn.close()
    from dbos import DBOS, SetWorkflowID

    peer.meter.write("ready")  # imports done: the rest of the restart is DBOS's
    DBOS(
        config={
            "name": "zincir-recovery",
            "system_database_url": "sqlite:///" + path,
            "log_level": "WARNING",
        }
    )

    @DBOS.step()
    def model_step(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return peer.respond(messages)

    @DBOS.step()
    def tool_step(call: dict[str, Any]) -> dict[str, Any]:
        return peer.run_tool(call)

    @DBOS.step()
    def verify_step(claim: list[int], last_index: int) -> list[Any]:
        accepted, evidence = peer.verify(claim, last_index)
        return [accepted, evidence]

    @DBOS.workflow()
    def agent_workflow() -> str:
        messages: list[dict[str, Any]] = [system_message(peer.task)]
        while True:
            last = messages[-1]
            if last["role"] == "assistant" and "tool_call" in last:
                call = last["tool_call"]
                result = tool_step(call)
                peer.kill.point(call["index"], "recorded")
                tool_message = {"role": "tool", "id": call["id"], "index": call["index"]}
                messages.append({**tool_message, "result": result})
            elif last["role"] == "assistant" and "claim" in last:
                claim = list(last["claim"])
                accepted, evidence = verify_step(claim, last_tool_index(messages))
                messages = peer.after_decision(messages, claim, accepted, evidence)
            elif last["role"] == "assistant":
                return "done"
            else:
                messages.append({"role": "assistant", **model_step(messages)})

    DBOS.launch()
    try:
        if DBOS.get_workflow_status(THREAD) is None:
            with SetWorkflowID(THREAD):
                agent_workflow()
        else:  # launching recovered the pending workflow: wait for it to finish
            handle = DBOS.retrieve_workflow(THREAD)
            while handle.get_status().status in ("PENDING", "ENQUEUED"):
                time.sleep(0.01)
        status = DBOS.retrieve_workflow(THREAD).get_status().status
    finally:
        DBOS.destroy(destroy_registry=True)
    if status != "SUCCESS":
        raise RuntimeError(f"the DBOS workflow ended {status}")
    peer.meter.write("final")


def main() -> None:
    system, config = sys.argv[1], json.loads(sys.argv[2])
    peer = Peer(config)
    try:
        {"langgraph": run_langgraph, "dbos": run_dbos}[system](peer)
    finally:
        peer.close()


if __name__ == "__main__":
    main()
