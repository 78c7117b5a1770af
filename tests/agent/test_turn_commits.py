"""One agent turn, few commits: each record is stored with the log entry made from it, and
the records of concurrent tool calls share a commit."""

from __future__ import annotations

import json
from typing import Any

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.reference import call, request_number, returns
from tests.helpers import rows
from zincir import DuplicateToolCall
from zincir.agent import Agent, FunctionModel, ToolRetriesExhausted, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart

# About the SQLite writer's group commit (its batch counters): SQLite only.
pytestmark = pytest.mark.sqlite_only


class Counted:
    """A model and three tools that count their calls, and what the store's writer had
    batched when each tool ran."""

    def __init__(self, store: zincir.SQLiteStore, responses: list[ModelResponse]) -> None:
        self.store = store
        self.responses = responses
        self.model_calls: list[int] = []
        self.tool_calls: list[tuple[str, int]] = []
        self.batched_at_tools: list[int] = []
        self.batched_at_model: list[int] = []
        self.commits_at_tools: list[int] = []
        self.commits_at_model: list[int] = []

    def commits(self) -> int:
        stats = self.store.writer_stats
        return stats.inline_commits + stats.batch_commits

    def agent(self) -> Agent:
        def ran(name: str, n: int) -> dict[str, Any]:
            self.tool_calls.append((name, n))
            self.batched_at_tools.append(self.store.writer_stats.batched_jobs)
            self.commits_at_tools.append(self.commits())
            return {"tool": name, "n": n}

        @tool
        async def alpha(n: int) -> dict[str, Any]:
            """The first tool."""
            return ran("alpha", n)

        @tool
        async def beta(n: int) -> dict[str, Any]:
            """The second tool."""
            return ran("beta", n)

        @tool
        async def gamma(n: int) -> dict[str, Any]:
            """The third tool."""
            return ran("gamma", n)

        async def model(request: ModelRequest) -> ModelResponse:
            number = request_number(request)
            self.model_calls.append(number)
            self.batched_at_model.append(self.store.writer_stats.batched_jobs)
            self.commits_at_model.append(self.commits())
            if number < len(self.responses):
                return self.responses[number]
            text = " + ".join(f"{item['tool']}={item['n']}" for item in returns(request))
            return ModelResponse(parts=[TextPart(text=f"done: {text}")])

        return Agent(
            FunctionModel(model),
            name="turns",
            instructions="Use the tools.",
            tools=[alpha, beta, gamma],
            tool_retries=self.tool_retries,
        )

    tool_retries = 3


THREE_CALLS = ModelResponse(
    parts=[call("call-a", "alpha", n=1), call("call-b", "beta", n=2), call("call-c", "gamma", n=3)]
)

RESULTS = {
    "call-a": {"tool": "alpha", "n": 1},
    "call-b": {"tool": "beta", "n": 2},
    "call-c": {"tool": "gamma", "n": 3},
}


def log_of(db: str, run_id: str) -> list[tuple[int, str, dict[str, Any], str | None]]:
    return [
        (int(seq), str(kind), json.loads(payload), call_id)
        for seq, kind, payload, call_id in rows(
            db,
            "SELECT seq, type, payload, tool_call_id FROM events WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
    ]


def tool_call_ids(db: str, run_id: str) -> dict[tuple[str, int], str]:
    """The call id each tool.call operation ran, by (step id, sequence)."""
    return {
        (step, int(sequence)): json.loads(text)["call"]["tool_call_id"]
        for step, sequence, text in rows(
            db,
            "SELECT step_id, sequence, input_json FROM operations WHERE run_id = ? "
            "AND kind = 'tool_call'",
            (run_id,),
        )
    }


async def test_each_record_is_followed_by_its_entry(durable: Durable) -> None:
    counted = Counted(durable.store, [THREE_CALLS])
    agent = counted.agent()
    result = await agent.run("go", durable=durable.binding(agent, "run-turn"))
    assert result.output == "done: alpha=1 + beta=2 + gamma=3"
    assert counted.model_calls == [0, 1]
    assert sorted(counted.tool_calls) == [("alpha", 1), ("beta", 2), ("gamma", 3)]

    log = log_of(durable.target, "run-turn")
    assert [seq for seq, *_ in log] == list(range(1, len(log) + 1))
    by_operation = tool_call_ids(durable.target, "run-turn")
    assert sorted(by_operation.values()) == ["call-a", "call-b", "call-c"]
    completed = [entry for entry in log if entry[1] == "operation_completed"]
    assert len(completed) == 5  # two model requests, three tool calls
    results_seen: list[str] = []
    responses_seen = 0
    for seq, _, payload, _ in completed:
        following = log[seq]  # the event at seq + 1 (seqs start at 1)
        if payload["kind"] == "tool_call":
            call_id = by_operation[(payload["step_id"], payload["sequence"])]
            assert (following[1], following[3]) == ("tool_result", call_id), (seq, log)
            assert following[2]["result"] == RESULTS[call_id]
            results_seen.append(call_id)
        else:
            assert payload["kind"] == "model_request"
            assert following[1] == "llm_call", (seq, log)
            responses_seen += 1
    assert sorted(results_seen) == ["call-a", "call-b", "call-c"]
    assert responses_seen == 2
    # the three intents directly follow the first response
    first_llm = next(entry for entry in log if entry[1] == "llm_call")[0]
    assert [(kind, call_id) for _, kind, _, call_id in log[first_llm : first_llm + 3]] == [
        ("tool_call", "call-a"),
        ("tool_call", "call-b"),
        ("tool_call", "call-c"),
    ]
    assert [kind for _, kind, _, _ in log].count("tool_result") == 3
    assert [kind for _, kind, _, _ in log].count("llm_call") == 2
    assert rows(durable.target, "SELECT COUNT(*) FROM open_intents")[0][0] == 0


async def test_the_three_tool_records_share_a_commit(durable: Durable) -> None:
    counted = Counted(durable.store, [THREE_CALLS])
    agent = counted.agent()
    await agent.run("go", durable=durable.binding(agent, "run-batch"))
    assert durable.store.writer_stats.largest_batch >= 3
    # every tool ran before any of their records was committed ...
    assert len(counted.batched_at_tools) == 3 and len(set(counted.batched_at_tools)) == 1
    # ... and the three records (each with its tool_result) were committed as one batch
    # before the next model request
    [before] = set(counted.batched_at_tools)
    assert counted.batched_at_model[1] - before == 3


async def test_the_tool_calls_are_claimed_with_the_models_record(durable: Durable) -> None:
    counted = Counted(durable.store, [THREE_CALLS])
    agent = counted.agent()
    await agent.run("go", durable=durable.binding(agent, "run-ahead"))
    # the model's claim committed before it was asked; then only its record (with the
    # three claims) before the tools ran, none of which committed a claim of its own
    assert counted.commits_at_tools == [counted.commits_at_model[0] + 1] * 3
    stamps = rows(
        durable.target,
        "SELECT step_id, sequence, created_at, completed_at, attempts FROM operations "
        "WHERE run_id = 'run-ahead' ORDER BY step_id, sequence",
    )
    model_completed = next(row[3] for row in stamps if row[:2] == ("model.request", 0))
    tool_rows = [row for row in stamps if row[0] == "tool.call"]
    assert len(tool_rows) == 3
    assert {(created, attempts) for _, _, created, _, attempts in tool_rows} == {
        (model_completed, 1)
    }


async def test_calls_claimed_with_a_response_the_loop_stops_before_are_released(
    durable: Durable,
) -> None:
    # alpha's calls are valid and claimed with their response; beta's fail its schema, the
    # second time once more than the agent allows, so that turn stops before alpha runs
    counted = Counted(
        durable.store,
        [
            ModelResponse(parts=[call("call-a", "alpha", n=1), call("call-b", "beta", n="x")]),
            ModelResponse(parts=[call("call-c", "alpha", n=4), call("call-d", "beta", n="y")]),
        ],
    )
    counted.tool_retries = 1
    agent = counted.agent()
    released: list[object] = []
    release = durable.store.release_operation_claim

    async def spied(key: Any, *, owner: str) -> bool:
        released.append(key)
        return await release(key, owner=owner)

    durable.store.release_operation_claim = spied  # type: ignore[method-assign]
    with pytest.raises(ToolRetriesExhausted):
        await agent.run("go", durable=durable.binding(agent, "run-stopped"))
    assert counted.tool_calls == [("alpha", 1)]
    assert [(key.step_id, key.sequence) for key in released] == [("tool.call", 1000)]  # type: ignore[attr-defined]
    assert rows(
        durable.target,
        "SELECT step_id, sequence, status FROM operations WHERE run_id = 'run-stopped' "
        "ORDER BY step_id, sequence",
    ) == [
        ("model.request", 0, "completed"),
        ("model.request", 1, "completed"),
        ("tool.call", 0, "completed"),
    ]


async def test_replaying_the_finished_run_calls_and_writes_nothing(durable: Durable) -> None:
    counted = Counted(durable.store, [THREE_CALLS])
    agent = counted.agent()
    first = await agent.run("go", durable=durable.binding(agent, "run-replay"))
    before = log_of(durable.target, "run-replay")
    operations = rows(durable.target, "SELECT COUNT(*) FROM operations")
    replaying = Counted(durable.store, [THREE_CALLS])
    again_agent = replaying.agent()
    again = await again_agent.run("go", durable=durable.binding(again_agent, "run-replay"))
    assert again == first
    assert replaying.model_calls == [] and replaying.tool_calls == []
    assert log_of(durable.target, "run-replay") == before
    assert rows(durable.target, "SELECT COUNT(*) FROM operations") == operations
    run = await durable.store.get_run("run-replay")
    assert run is not None and run["status"] == "completed"


async def test_a_reused_call_id_fails_the_turn_but_keeps_the_models_record(
    durable: Durable,
) -> None:
    responses = [
        ModelResponse(parts=[call("dup", "alpha", n=1)]),
        ModelResponse(parts=[call("dup", "beta", n=2)]),
    ]
    counted = Counted(durable.store, responses)
    agent = counted.agent()
    with pytest.raises(DuplicateToolCall):
        await agent.run("go", durable=durable.binding(agent, "run-dup"))
    assert counted.model_calls == [0, 1]
    assert counted.tool_calls == [("alpha", 1)]
    stored = rows(
        durable.target,
        "SELECT sequence, status FROM operations WHERE run_id = 'run-dup' "
        "AND step_id = 'model.request' ORDER BY sequence",
    )
    assert stored == [(0, "completed"), (1, "completed")]
    log = log_of(durable.target, "run-dup")
    kinds = [kind for _, kind, _, _ in log]
    assert kinds.count("llm_call") == 1  # the second response did not fit the log
    assert kinds.count("operation_completed") == 3  # but its record's event is there
    assert log[-1][1] == "operation_completed" and log[-1][2]["kind"] == "model_request"
    assert log[-1][2]["sequence"] == 1

    # a rerun replays the stored response: the model is not asked again
    rerun = Counted(durable.store, responses)
    again_agent = rerun.agent()
    with pytest.raises(DuplicateToolCall):
        await again_agent.run("go", durable=durable.binding(again_agent, "run-dup"))
    assert rerun.model_calls == [] and rerun.tool_calls == []
    assert log_of(durable.target, "run-dup") == log
