"""Approvals and deferred tools on ZincirDurability: Suspended records, the continuation run,
and RequestInput waits answered through zincir messages across a restart."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent, ApprovalRequired, CallDeferred  # noqa: E402
from pydantic_ai.capabilities import RequestInput  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext  # noqa: E402

import zincir  # noqa: E402
from tests.helpers import rows  # noqa: E402
from zincir import WorkflowSuspended  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability, resolve_event  # noqa: E402


def refund_model(calls: Counter[str]) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model)


async def test_a_tool_that_asks_for_approval_is_a_suspended_record(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            refund_model(calls),
            name="desk",
            output_type=[str, DeferredToolRequests],
            capabilities=[ZincirDurability(store)],
        )

        @agent.tool
        def refund(ctx: RunContext[None], order: str) -> str:
            """Refund an order once approved."""
            calls["refund"] += 1
            if not ctx.tool_call_approved:
                raise ApprovalRequired(metadata={"why": "money"})
            return f"refunded {order}"

        first = await agent.run("refund", run_id="desk-1")
        again = await agent.run("refund", run_id="desk-1")
        assert isinstance(first.output, DeferredToolRequests)
        assert [call.tool_call_id for call in first.output.approvals] == ["c1"]
        assert first.output.metadata == {"c1": {"why": "money"}}
        assert isinstance(again.output, DeferredToolRequests)
        assert calls == Counter(model=1, refund=1)
        (record,) = rows(db_path, "SELECT record FROM operations WHERE step_id LIKE '%tool.call'")
        suspended = json.loads(record[0])["outcome"]["suspended"]
        assert suspended["reason"] == "approval"
        # pydantic-ai's private wire format, pinned: a change must be noticed here
        assert json.loads(suspended["state_json"]) == {
            "metadata": {"why": "money"},
            "kind": "approval_required",
        }
        assert rows(db_path, "SELECT status, lease_owner FROM agent_runs") == [("running", None)]

        # (b) the continuation: a child run with the decision, the parent untouched
        resumed = await agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"c1": True}),
            run_id="desk-1.resume",
        )
    assert resumed.output == "done"
    assert calls == Counter(model=2, refund=2)
    assert rows(db_path, "SELECT id, parent_id, status FROM agent_runs ORDER BY id") == [
        ("desk-1", None, "running"),
        ("desk-1.resume", "desk-1", "completed"),
    ]


async def test_a_deferred_call_is_an_external_tool_suspension(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            refund_model(calls),
            name="ext",
            output_type=[str, DeferredToolRequests],
            capabilities=[ZincirDurability(store)],
        )

        @agent.tool_plain
        def refund(order: str) -> str:
            """Refund through the bank."""
            calls["refund"] += 1
            raise CallDeferred()

        result = await agent.run("refund", run_id="ext-1")
    assert isinstance(result.output, DeferredToolRequests)
    assert [call.tool_call_id for call in result.output.calls] == ["c1"]
    (record,) = rows(db_path, "SELECT record FROM operations WHERE step_id LIKE '%tool.call'")
    assert json.loads(record[0])["outcome"]["suspended"]["reason"] == "external_tool"


def waiting_agent(store: Any, calls: Counter[str], tokens: list[str]) -> Agent[None, str]:
    def ask(ctx: RunContext[None], requests: DeferredToolRequests, token: str) -> None:
        calls["ask"] += 1
        tokens.append(token)
        return None  # a person answers later, through the token

    agent: Agent[None, str] = Agent(
        refund_model(calls),
        name="waiter",
        capabilities=[RequestInput(ask), ZincirDurability(store)],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order (needs a person's approval)."""
        calls["refund"] += 1
        return f"refunded {order}"

    return agent


async def test_a_request_input_wait_survives_a_restart_and_keeps_its_first_answer(
    db_path: Path,
) -> None:
    calls: Counter[str] = Counter()
    tokens: list[str] = []
    async with zincir.open_store(db_path) as store:
        with pytest.raises(WorkflowSuspended, match="wait-1"):
            await waiting_agent(store, calls, tokens).run("refund", run_id="wait-1")
        assert tokens == ["zincir:wait-1:deferred_tool_calls:0"]
        assert rows(db_path, "SELECT status, wait_kind FROM agent_runs") == [("running", "message")]
        with pytest.raises(WorkflowSuspended):  # still unanswered: it parks again, asks once
            await waiting_agent(store, calls, tokens).run("refund", run_id="wait-1")
        assert calls == Counter(model=1, ask=1)
        await resolve_event(store, "wait-1", tokens[0], {"approvals": {"c1": True}})
    async with zincir.open_store(db_path) as store:  # another process, after the answer
        result = await waiting_agent(store, calls, tokens).run("refund", run_id="wait-1")
        assert result.output == "done"
        assert calls == Counter(model=2, ask=1, refund=1)
        await resolve_event(store, "wait-1", tokens[0], {"approvals": {"c1": False}})
        again = await waiting_agent(store, calls, tokens).run("refund", run_id="wait-1")
    assert again.output == "done"
    assert calls == Counter(model=2, ask=1, refund=1)  # the late, conflicting answer is ignored
    assert rows(db_path, "SELECT status FROM agent_runs") == [("completed",)]
    kinds = rows(db_path, "SELECT kind FROM operations WHERE step_id LIKE '%external%' ORDER BY 1")
    assert kinds == [("approval_resume",), ("event_delivery",)]
