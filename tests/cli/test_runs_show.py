"""``zincir runs show``: a run's output in the summary, and ``--json`` with whole payloads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import zincir
from tests.agent.reference import call, request_number
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.cli import main
from zincir.payloads import ModelRequest, ModelResponse, TextPart

NOTES = "n" * 500  # longer than a shortened payload
ANSWER = "The order shipped.\nIt arrives on Friday."
HANDLERS = Handlers(model_request="request", tool_call="tools")


def script(request: ModelRequest) -> ModelResponse:
    if request_number(request) == 0:
        return ModelResponse(parts=[call("c1", "lookup", order_id="A-17")])
    return ModelResponse(parts=[TextPart(text=ANSWER)])


@tool
async def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "notes": NOTES}


def agent_run(db: Path) -> None:
    async def main() -> None:
        store = zincir.open_store(db)
        try:
            agent = Agent(FunctionModel(script), name="shipping", tools=[lookup])
            registry = zincir.HandlerRegistry()
            serve(registry, agent, HANDLERS)
            runtime = zincir.LocalRuntime(store, registry)
            await agent.run("Where is A-17?", durable=DurableBinding(runtime, "asked", HANDLERS))
            failing = await zincir.AgentContext.create(store, "agent", run_id="broken")
            await failing.fail("RuntimeError: the tool server is down")
        finally:
            await store.close()

    asyncio.run(main())


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_runs_show_prints_the_output_and_a_failed_runs_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent_run(db)
    shown = invoke("runs", "show", "asked", "--db", str(db)).splitlines()
    at = shown.index("output    The order shipped.")
    assert shown[at + 1] == "          It arrives on Friday."
    assert NOTES not in "\n".join(shown)  # the event log stays shortened
    broken = invoke("runs", "show", "broken", "--db", str(db))
    assert "error     RuntimeError: the tool server is down" in broken
    assert "output" not in broken


def test_runs_show_json_has_every_payload_whole(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent_run(db)
    document = json.loads(invoke("runs", "show", "asked", "--json", "--db", str(db)))
    run = document["run"]
    assert run["id"] == "asked" and run["status"] == "completed" and run["name"] == "shipping"
    assert document["output"] == ANSWER and run["result"]["output"] == ANSWER
    assert document["waiting"] is None
    events = document["events"]
    assert [event["seq"] for event in events] == list(range(1, run["last_seq"] + 1))
    results = [event for event in events if event["type"] == "tool_result"]
    assert results and NOTES in json.dumps(results[0]["payload"])
    assert {"seq", "type", "created_at", "tool_call_id", "payload"} == set(events[0])
    broken = json.loads(invoke("runs", "show", "broken", "--json", "--db", str(db)))
    assert broken["output"] is None and broken["run"]["status"] == "failed"
    assert broken["run"]["last_error"] == "RuntimeError: the tool server is down"
