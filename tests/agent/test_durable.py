"""The durable path: replay, pinned identities, the run's log, concurrency, bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.reference import build, call, lines, parallel
from tests.helpers import event_types, select, seqs
from zincir.agent import Agent, DurableOperationFailed, FunctionModel, ToolRetriesExhausted
from zincir.payloads import ModelRequest, ModelResponse, TextPart
from zincir.store import OperationKey


def operations(db: str, run_id: str) -> list[tuple[str, int, str, str]]:
    return [
        (step, seq, kind, handler)
        for step, seq, kind, handler in select(
            db,
            "SELECT step_id, sequence, kind, handler_id FROM operations WHERE run_id = ? "
            "ORDER BY sequence, step_id",
            (run_id,),
        )
    ]


async def test_replay_of_a_completed_run_calls_nothing(durable: Durable, tmp_path: Path) -> None:
    log = tmp_path / "log"
    agent = build(log)
    first = await agent.run("Use both tools.", durable=durable.binding(agent))
    assert first.output == "done: first=1 + second=2"
    assert len(lines(log)) == 5
    again = await build(log).run("Use both tools.", durable=durable.binding(build(log)))
    assert again == first
    assert len(lines(log)) == 5
    run = await durable.store.get_run("run-1")
    assert run is not None and run["status"] == "completed" and run["name"] == "reference"
    assert run["provider"] == "function"


async def test_each_stored_operation_replays_without_its_handler(
    durable: Durable, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    agent = build(log)
    binding = durable.binding(agent)
    await agent.run("Use both tools.", durable=binding)
    keys = select(durable.target, "SELECT step_id, sequence FROM operations WHERE run_id = 'run-1'")
    assert len(keys) == 5
    for step_id, sequence in keys:  # each record composed whole from the stored content
        row = await durable.store.get_operation(OperationKey("run-1", step_id, sequence))
        assert row is not None and row.record is not None
        record = zincir.decode_record(row.record)
        assert await binding.runtime.execute(record.invocation) == record
    assert len(lines(log)) == 5


async def test_pinned_identities_sequential(durable: Durable, tmp_path: Path) -> None:
    agent = build(tmp_path / "log")
    await agent.run("Use both tools.", durable=durable.binding(agent))
    assert operations(durable.target, "run-1") == [
        ("model.request", 0, "model_request", "ref-model"),
        ("tool.call", 0, "tool_call", "ref-tools"),
        ("model.request", 1, "model_request", "ref-model"),
        ("model.request", 2, "model_request", "ref-model"),
        ("tool.call", 1000, "tool_call", "ref-tools"),
    ]


async def test_pinned_identities_two_calls_in_one_response_with_a_namespace(
    durable: Durable, tmp_path: Path
) -> None:
    agent = build(tmp_path / "log", script=parallel)
    binding = durable.binding(agent, namespace="ns")
    result = await agent.run("go", durable=binding)
    assert result.output == "done: first=1 + second=2"
    assert operations(durable.target, "run-1") == [
        ("ns.model.request", 0, "model_request", "ref-model"),
        ("ns.tool.call", 0, "tool_call", "ref-tools"),
        ("ns.model.request", 1, "model_request", "ref-model"),
        ("ns.tool.call", 1, "tool_call", "ref-tools"),
    ]
    tool_input = select(
        durable.target,
        "SELECT input_json FROM operations WHERE step_id = 'ns.tool.call' AND sequence = 1",
    )[0][0]
    assert json.loads(tool_input)["call"]["tool_name"] == "second"


async def test_input_documents_are_canonical(durable: Durable, tmp_path: Path) -> None:
    """Two runs of the same conversation store byte-identical model inputs."""
    for run_id in ("run-a", "run-b"):
        agent = build(tmp_path / run_id)
        await agent.run("Use both tools.", durable=durable.binding(agent, run_id))
    keys = select(
        durable.target,
        "SELECT run_id, step_id, sequence FROM operations ORDER BY run_id, step_id, sequence",
    )
    inputs = []
    for run_id, step_id, sequence in keys:  # each input whole, composed from its content
        row = await durable.store.get_operation(OperationKey(run_id, step_id, sequence))
        assert row is not None and row.record is not None
        text = zincir.decode_record(row.record).invocation.input_json
        inputs.append((run_id, step_id, sequence, text))
    by_run: dict[str, list[str]] = {}
    for run_id, _step, _sequence, text in inputs:
        by_run.setdefault(run_id, []).append(text.replace(run_id, "RUN"))
    assert by_run["run-a"] == by_run["run-b"]
    model_input = json.loads(inputs[0][3])
    assert [m["role"] for m in model_input["messages"]] == ["system", "user"]


async def test_the_log_reads_like_an_agent_context_run(durable: Durable, tmp_path: Path) -> None:
    agent = build(tmp_path / "log", script=parallel)
    await agent.run("go", durable=durable.binding(agent))
    types = [t for t in event_types(durable.target, "run-1") if t != "operation_completed"]
    assert types == [
        "state_transition",
        "llm_call",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "llm_call",
        "state_transition",
    ]
    assert types.count("llm_call") == 2
    found = seqs(durable.target, "run-1")
    assert found == list(range(found[0], found[0] + len(found)))
    llm = select(
        durable.target,
        "SELECT payload FROM events WHERE run_id = 'run-1' AND type = 'llm_call' ORDER BY seq",
    )
    first = json.loads(llm[0][0])
    assert [c["id"] for c in first["tool_calls"]] == ["call-a", "call-b"]
    assert json.loads(llm[1][0])["content"] == "done: first=1 + second=2"
    assert select(durable.target, "SELECT COUNT(*) FROM open_intents")[0][0] == 0


async def test_two_agents_under_gather_keep_their_identities(
    durable: Durable, tmp_path: Path
) -> None:
    one = build(tmp_path / "one", name="one")
    two = build(tmp_path / "two", script=parallel, name="two")
    a, b = await asyncio.gather(
        one.run("go", durable=durable.binding(one, "run-one")),
        two.run("go", durable=durable.binding(two, "run-two")),
    )
    assert a.output == b.output == "done: first=1 + second=2"
    assert [(s, n) for s, n, *_ in operations(durable.target, "run-one")] == [
        ("model.request", 0),
        ("tool.call", 0),
        ("model.request", 1),
        ("model.request", 2),
        ("tool.call", 1000),
    ]
    assert [(s, n) for s, n, *_ in operations(durable.target, "run-two")] == [
        ("model.request", 0),
        ("tool.call", 0),
        ("model.request", 1),
        ("tool.call", 1),
    ]
    for run_id in ("run-one", "run-two"):
        found = seqs(durable.target, run_id)
        assert found == list(range(found[0], found[0] + len(found)))


async def test_invented_tool_and_bad_arguments_durably(durable: Durable, tmp_path: Path) -> None:
    def script(number: int, request: ModelRequest) -> ModelResponse:
        if number == 0:
            return ModelResponse(parts=[call("c0", "invented"), call("c1", "first", n="x")])
        if number == 1:
            return ModelResponse(parts=[call("c2", "first", n=4)])
        return ModelResponse(parts=[TextPart(text="ok")])

    log = tmp_path / "log"
    agent = build(log, script=script)
    result = await agent.run("go", durable=durable.binding(agent))
    assert result.output == "ok"
    assert [(s, n) for s, n, *_ in operations(durable.target, "run-1")] == [
        ("model.request", 0),
        ("model.request", 1),
        ("model.request", 2),
        ("tool.call", 1000),
    ]
    errors = select(
        durable.target,
        "SELECT tool_call_id, payload FROM events WHERE run_id = 'run-1' AND type = 'tool_result' "
        "ORDER BY seq",
    )
    assert {call_id: json.loads(p)["is_error"] for call_id, p in errors} == {
        "c0": True,
        "c1": True,
        "c2": False,
    }
    again = await build(log, script=script).run("go", durable=durable.binding(build(log)))
    assert again.output == "ok"


async def test_exhausted_retries_fail_the_run(durable: Durable, tmp_path: Path) -> None:
    def script(number: int, request: ModelRequest) -> ModelResponse:
        return ModelResponse(parts=[call(f"c{number}", "first", n="bad")])

    agent = build(tmp_path / "log", script=script)
    with pytest.raises(ToolRetriesExhausted):
        await agent.run("go", durable=durable.binding(agent))
    run = await durable.store.get_run("run-1")
    assert run is not None and run["status"] == "failed"
    assert select(durable.target, "SELECT COUNT(*) FROM open_intents")[0][0] == 0


@pytest.mark.parametrize("answer", ["plain text", {"parts": [{"type": "image"}]}])
async def test_an_invalid_model_response_fails_cleanly(durable: Durable, answer: Any) -> None:
    agent = Agent(FunctionModel(lambda request: answer), name="bad")
    with pytest.raises(DurableOperationFailed) as caught:
        await agent.run("go", durable=durable.binding(agent))
    error = caught.value
    assert isinstance(error, zincir.OperationFailed) and error.error == "InvalidModelResponse"
    assert error.run_id == "run-1" and error.record.invocation.step_id == "model.request"
    assert event_types(durable.target, "run-1").count("llm_call") == 0
    run = await durable.store.get_run("run-1")
    assert run is not None and run["status"] == "failed"


async def test_a_failing_tool_raises_operation_failed_with_its_record(
    durable: Durable, tmp_path: Path
) -> None:
    from zincir.agent import tool

    @tool
    def broken() -> None:
        raise zincir.OperationFailed("Broken", retryable=False)

    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse(parts=[call("c0", "broken")])

    agent = Agent(FunctionModel(model), tools=[broken])
    with pytest.raises(zincir.OperationFailed, match="Broken") as caught:
        await agent.run("go", durable=durable.binding(agent))
    assert isinstance(caught.value, DurableOperationFailed)
    assert caught.value.record.invocation.sequence == 0


async def test_a_live_owner_holds_the_run(durable: Durable, tmp_path: Path) -> None:
    ctx = await zincir.AgentContext.create(durable.store, name="other", run_id="run-1")
    agent = build(tmp_path / "log")
    with pytest.raises(zincir.LeaseHeld):
        await agent.run("go", durable=durable.binding(agent))
    assert lines(tmp_path / "log") == []
    await ctx.close()
