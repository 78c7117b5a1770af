"""DurableRunner with an MCP server's tools, the SDK's own tracing, and check-compat."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is in the dev extra")

from agents import Agent, set_trace_processors, set_tracing_disabled  # noqa: E402
from agents.mcp import MCPServerStdio  # noqa: E402
from agents.tracing import TracingProcessor  # noqa: E402

import zincir  # noqa: E402
from tests.agent.openai_server import ChatServer, Reply, completion, tool_call  # noqa: E402
from tests.durable_mcp.conftest import ledger_lines, server_env  # noqa: E402
from tests.integrations.openai_agents.support_agents import (  # noqa: E402
    ANSWER,
    PROMPT,
    model,
    script,
    support,
)
from zincir.integrations.openai_agents import DurableRunner  # noqa: E402
from zincir.runs._compat import check_compat  # noqa: E402


async def test_an_mcp_tool_call_is_replayed_not_sent_again(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    server.script(
        Reply(body=completion(None, [tool_call("m-1", "add", '{"a":2,"b":3}')])),
    )  # the answer's request finds the script exhausted: the first attempt fails there
    runner = DurableRunner(store)

    async def attempt() -> Any:
        params = {
            "command": sys.executable,
            "args": ["-m", "tests.durable_mcp.server"],
            "env": server_env(ledger),
        }
        async with MCPServerStdio(params, cache_tools_list=True) as mcp:
            agent = Agent(name="adder", model=model(server.client()), mcp_servers=[mcp])
            return await runner.run(agent, "Add 2 and 3.", run_id="mcp-1")

    with pytest.raises(Exception):  # noqa: B017 - the SDK's error for the 500
        await attempt()
    assert [line for line in ledger_lines(ledger) if line.startswith("call")] == [
        'call add {"a": 2, "b": 3}'
    ]
    server.script(Reply(body=completion("5")))
    result = await attempt()
    assert result.final_output == "5"
    assert len([line for line in ledger_lines(ledger) if line.startswith("call")]) == 1
    steps = [
        (event.payload["step_id"], event.payload["kind"])
        for event in await store.list_events("mcp-1")
        if event.type == "operation_completed"
    ]
    assert ("openai_agents.mcp.request", "mcp_request") in steps
    assert "5" in str(server.bodies[-1]["messages"][-1])


class Collected(TracingProcessor):
    """The SDK's spans and traces, kept in memory (nothing is exported)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.traces: list[Any] = []

    def on_trace_start(self, trace: Any) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def kinds(self) -> list[str]:
        return [span.span_data.type for span in self.spans]


@pytest.fixture
def collected() -> Any:
    processor = Collected()
    set_trace_processors([processor])  # replaces the exporter to OpenAI's endpoint
    set_tracing_disabled(False)
    try:
        yield processor
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])


async def test_the_sdk_traces_each_real_model_call_once_grouped_by_run(
    store: zincir.Store, server: ChatServer, tmp_path: Path, collected: Collected
) -> None:
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log")
    await runner.run(agent, PROMPT, run_id="traced-1")
    assert collected.kinds().count("generation") == 4
    assert collected.kinds().count("handoff") == 1
    assert [trace.group_id for trace in collected.traces] == ["traced-1"]
    replayed = await runner.run(agent, PROMPT, run_id="traced-1")
    assert replayed.final_output == ANSWER
    assert collected.kinds().count("generation") == 4  # a replayed call made no new one
    assert collected.kinds().count("agent") == 4  # the replay's agent spans, as the SDK's own
    assert [trace.group_id for trace in collected.traces] == ["traced-1", "traced-1"]


async def test_check_compat_replays_a_waiting_run_and_names_a_changed_agent(
    store_target: str, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    log = tmp_path / "calls.log"
    async with zincir.open_store(store_target) as store:
        runner = DurableRunner(store)
        agent = support(server.client(), log, approve_refund=True)
        paused = await runner.run(agent, PROMPT, run_id="compat-1")
        assert paused.interruptions
        reports = await check_compat(store_target, runner.resume_handler(agent))
        assert [(r.run_id, r.verdict) for r in reports] == [("compat-1", "compatible")]
        changed = agent.clone(instructions="Route the customer to sales.")
        reports = await check_compat(store_target, runner.resume_handler(changed))
        assert [(r.run_id, r.verdict) for r in reports] == [("compat-1", "divergent")]
        assert "input drift" in reports[0].detail
    assert len(server.received) == 3
    assert log.read_text("utf-8").splitlines() == ["tool lookup A-17"]


async def test_the_inspector_shows_the_run_as_a_conversation(
    db_path: Path, server: ChatServer, tmp_path: Path
) -> None:
    from tests.inspector.conftest import client_for
    from zincir.inspector._app import run_url

    server.script(*script())
    async with zincir.open_store(db_path) as store:
        await DurableRunner(store).run(
            support(server.client(), tmp_path / "calls.log"), PROMPT, run_id="shown-1"
        )
    page = client_for(db_path).get(run_url("shown-1"))
    assert page.status_code == 200
    text = page.text
    assert 'href="#conversation"' in text and 'id="conversation"' in text
    assert ANSWER in text
    assert "lookup" in text and "refund" in text
    assert "order A-17: paid 4200 cents" in text
