"""Spin detection: the same tool call repeated, the same response repeated, rounds without
an accepted checkpoint; warned once, paused until acknowledged, or failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import zincir
from zincir import (
    AgentContext,
    InvalidInput,
    SpinDetected,
    SpinRules,
    ToolCall,
    Verification,
    acknowledge_spin,
)
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, ToolCallPart
from zincir.store import Store
from zincir.store._stall import stall_reason


def test_bad_rules_are_refused() -> None:
    for bad in (
        {"repeated_call": 1},
        {"repeated_response": 0},
        {"rounds_without_checkpoint": 0},
        {"repeated_call": "3"},
        {"action": "scream"},
    ):
        with pytest.raises(InvalidInput):
            SpinRules(**bad)


async def _types(store: Store, run_id: str) -> list[str]:
    return [event.type for event in await store.list_events(run_id)]


async def test_a_repeated_call_is_warned_once(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="r")
    rules = SpinRules(repeated_call=3, repeated_response=None)
    for turn in range(5):
        await ctx.record_response(f"try {turn}", [ToolCall(f"c{turn}", "fetch", {"url": "x"})])
        await ctx.check_spin(rules)
        await ctx.record_tool_result(f"c{turn}", {"error": "timeout"})
    warnings = [e for e in await store.list_events("r") if e.type == "spin_detected"]
    assert len(warnings) == 1
    payload = warnings[0].payload
    assert payload["rule"] == "repeated_call"
    assert payload["evidence"]["tool"] == "fetch" and payload["evidence"]["times"] == 3
    assert payload["action"] == "warn"
    await ctx.close()
    # A new owner reads the warning back and does not log it again.
    again = await AgentContext.recover(store, "r")
    await again.check_spin(rules)
    assert (await _types(store, "r")).count("spin_detected") == 1
    await again.close()


async def test_a_repeated_response_pauses_until_acknowledged(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="p")
    rules = SpinRules(repeated_call=None, repeated_response=3, action="pause")
    for _ in range(2):
        await ctx.record_response("I will look again.", [])
        await ctx.check_spin(rules)
    await ctx.record_response("I will look again.", [])
    with pytest.raises(SpinDetected) as raised:
        await ctx.check_spin(rules)
    assert raised.value.rule == "repeated_response"
    assert raised.value.evidence["times"] == 3
    assert "p" in str(raised.value)
    run = await store.get_run("p")
    assert run is not None and (run["wait_kind"], run["wait_ref"]) == ("message", "zincir.spin")
    await ctx.close()
    parked = await store.get_run("p")
    assert parked is not None
    reason = stall_reason(parked, store.now())
    assert reason is not None and reason.kind == "spin"

    await acknowledge_spin(store, "p", note="looked at it")
    run = await store.get_run("p")
    assert run is not None and run["wait_kind"] is None
    resumed = await AgentContext.recover(store, "p")
    await resumed.check_spin(rules)  # counts start again after the acknowledgement
    await resumed.record_response("I will look again.", [])
    await resumed.check_spin(rules)
    await resumed.close()


async def test_rounds_without_an_accepted_checkpoint(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="k")
    rules = SpinRules(
        repeated_call=None, repeated_response=None, rounds_without_checkpoint=2, action="fail"
    )
    await ctx.record_response("one", [])
    await ctx.check_spin(rules)
    await ctx.checkpoint({"completed": ["one"]}, lambda c: Verification(True))
    await ctx.record_response("two", [])
    await ctx.check_spin(rules)  # one round since the accepted checkpoint
    await ctx.record_response("three", [])
    with pytest.raises(SpinDetected) as raised:
        await ctx.check_spin(rules)
    assert raised.value.rule == "rounds_without_checkpoint"
    run = await store.get_run("k")
    assert run is not None and run["status"] == "failed"


async def test_the_agent_loop_stops_before_the_repeated_call_runs(
    store: Store, tmp_path: Path
) -> None:
    ran: list[int] = []

    @tool
    async def fetch(url: str) -> dict[str, Any]:
        """Fetch a page."""
        ran.append(1)
        return {"error": "timeout"}

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        call = ToolCallPart(tool_call_id=f"c{number}", tool_name="fetch", arguments={"url": "x"})
        return ModelResponse(parts=[call])

    agent = Agent(FunctionModel(model), name="looper", tools=[fetch])
    handlers = Handlers(model_request="looper-model", tool_call="looper-tools")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    runtime = zincir.LocalRuntime(store, registry)
    rules = SpinRules(repeated_call=3, action="pause")
    binding = DurableBinding(runtime, "loop", handlers, spin=rules)
    with pytest.raises(SpinDetected):
        await agent.run("Fetch it.", durable=binding)
    assert len(ran) == 2  # the third identical call was logged, never run
    run = await store.get_run("loop")
    assert run is not None and run["wait_ref"] == "zincir.spin"
    with pytest.raises(SpinDetected):  # run again: the same finding, nothing new runs
        await agent.run("Fetch it.", durable=binding)
    assert len(ran) == 2
