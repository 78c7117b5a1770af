"""The run page's conversation view: a durable agent run (zincir.agent on LocalRuntime) and a
plain AgentContext run read as a chat transcript, escaped, paged with the event log."""

from __future__ import annotations

import asyncio
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import client_for, seed
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import XSS_CLOSE, XSS_IMG, XSS_SCRIPT
from tests.inspector.test_browser import (
    ARTIFACTS,
    PNG_MAGIC,
    chromium,
    dump_dom,
    require_chromium,
)
from tests.inspector.ui_process import ui_server
from zincir import AgentContext, SQLiteStore, ToolCall
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.inspector._app import MAX_TEXT, run_url
from zincir.inspector._db import EVENT_PAGE_SIZE
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, Usage

HANDLERS = Handlers(model_request="conv-model", tool_call="conv-tools")
LONG_ANSWER = "The refund went through. " * 60 + XSS_SCRIPT  # folds behind a preview
HUGE_RESULT = "x" * (MAX_TEXT + 5_000)  # cut on the page, whole in the API


@dataclass
class Runs:
    agent: str = "support-0192"
    failed: str = "bad-model"
    stuck: str = "stuck-model"
    plain: str = ""
    paged: str = ""
    quiet: str = ""
    boundary_calls: tuple[str, ...] = ()


def _call(call_id: str, name: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(tool_call_id=call_id, tool_name=name, arguments=arguments)


def _binding(store: SQLiteStore, agent: Agent, run_id: str) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    return DurableBinding(zincir.LocalRuntime(store, registry), run_id, HANDLERS)


def support_agent() -> Agent:
    """Two tools; the model looks up, refunds with a bad argument, refunds again, answers."""

    @tool
    async def lookup(query: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order": "A-17", "status": "shipped", "echo": query}

    @tool
    async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Refund an order."""
        return {"refunded": amount_cents, "order": order_id}

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        usage = Usage(input_tokens=100 + number, output_tokens=7)
        if number == 0:
            return ModelResponse(
                parts=[
                    TextPart(text=f"Looking it up {XSS_SCRIPT}"),
                    _call("c-1", "lookup", query=XSS_CLOSE),
                    _call("c-2", "refund", order_id="A-17", amount_cents="lots"),
                ],
                usage=usage,
                finish_reason="tool_calls",
            )
        if number == 1:
            return ModelResponse(
                parts=[_call("c-3", "refund", order_id="A-17", amount_cents=500)], usage=usage
            )
        return ModelResponse(parts=[TextPart(text=LONG_ANSWER)], usage=usage, finish_reason="stop")

    return Agent(
        FunctionModel(model),
        name="support",
        instructions=f"Help with orders. {XSS_IMG}",
        tools=[lookup, refund],
    )


async def seed_conversations(store: SQLiteStore) -> Runs:
    runs = Runs()
    agent = support_agent()
    result = await agent.run(
        f"Where is order A-17? {XSS_SCRIPT}", durable=_binding(store, agent, runs.agent)
    )
    assert result.output == LONG_ANSWER

    bad = Agent(FunctionModel(lambda request: "not a response"), name="bad")
    with pytest.raises(zincir.OperationFailed):
        await bad.run("go", durable=_binding(store, bad, runs.failed))

    entered = asyncio.Event()

    async def hang(request: ModelRequest) -> ModelResponse:
        entered.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    stuck = Agent(FunctionModel(hang), name="stuck", instructions="Wait.")
    task = asyncio.create_task(stuck.run("hold on", durable=_binding(store, stuck, runs.stuck)))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    ctx = await AgentContext.create(store, name="byo-loop", provider="openai")
    runs.plain = ctx.run_id
    await ctx.record_response(
        f"Plan {XSS_SCRIPT}",
        [ToolCall("p-1", "search", {"q": XSS_CLOSE}), ToolCall("p-2", "fetch", {"url": "x"})],
        "tool_use",
        usage={"input_tokens": 12, "output_tokens": 3},
        model="gpt-test",
    )
    await ctx.record_tool_result("p-1", {"error": XSS_IMG}, is_error=True)
    await ctx.record_tool_result("p-2", HUGE_RESULT)
    await ctx.record_response("Fetching more", [ToolCall("p-3", "fetch", {"url": "y"})], None)
    await ctx.close()  # p-3 stays without a result: in doubt

    ctx = await AgentContext.create(store, name="long-loop")
    runs.paged = ctx.run_id
    turn = 0

    async def last_seq() -> int:
        run = await store.get_run(runs.paged)
        assert run is not None
        return int(run["last_seq"] or 0)

    while await last_seq() < EVENT_PAGE_SIZE - 2:
        await ctx.record_response(f"turn {turn}", [ToolCall(f"t-{turn}", "step", {"n": turn})])
        await ctx.record_tool_result(f"t-{turn}", turn)
        turn += 1
    runs.boundary_calls = ("b-1", "b-2", "b-3")
    await ctx.record_response(
        "three at once", [ToolCall(i, "step", {}) for i in runs.boundary_calls]
    )
    for call_id in runs.boundary_calls:
        await ctx.record_tool_result(call_id, f"done {call_id}")
    await ctx.complete()

    ctx = await AgentContext.create(store, name="no-model")
    runs.quiet = ctx.run_id
    await ctx.complete()
    return runs


@pytest.fixture(scope="module")
def conversations(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Runs]:
    path = tmp_path_factory.mktemp("conversation") / "zincir.db"
    return path, seed(path, seed_conversations)


@pytest.fixture(scope="module")
def conv_client(conversations: tuple[Path, Runs]) -> TestClient:
    return client_for(conversations[0])


def section(page: str) -> str:
    """The conversation section of a run page."""
    start = page.index('<section id="conversation"')
    return page[start : page.index("</section>", start)]


def entries(client: TestClient, run_id: str, query: str = "") -> dict[str, Any]:
    conversation: dict[str, Any] = client.get(f"/api/runs/{run_id}{query}").json()["conversation"]
    return conversation


def test_a_durable_agent_run_reads_as_a_chat(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    page = conv_client.get(run_url(runs.agent))
    assert page.status_code == 200
    chat = section(page.text)
    assert 'href="#conversation">Conversation <span class="count">3</span>' in page.text
    # the prompt from model.request #0, then each turn and result in log order
    order = [
        "instructions",
        "Help with orders.",
        "Where is order A-17?",
        "tools on offer",
        "model.request #0",
        "Looking it up",
        "lookup",
        "c-1",
        "refund",
        "c-2",
        "tool result",
        "model.request #1",
        "c-3",
        "model.request #2",
        "The refund went through.",
    ]
    at = 0
    for text in order:  # each after the one before
        at = chat.index(text, at) + len(text)
    for usage in ("input tokens 100", "input tokens 101", "input tokens 102", "output tokens 7"):
        assert usage in chat
    assert (
        '<span class="chip">tool_calls</span>' in chat and '<span class="chip">stop</span>' in chat
    )
    assert chat.count('class="msg msg-tool"') == 2  # lookup and the good refund
    assert chat.count('class="msg msg-tool msg-error"') == 1  # the refund with a bad argument
    assert "in doubt" not in chat
    assert '<details class="msg-fold"><summary>The refund went through.' in chat  # long: folded


def test_the_api_carries_the_same_conversation(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    conversation = entries(conv_client, runs.agent)
    assert conversation["present"] and conversation["turns"] == 3
    prompt = conversation["prompt"]
    assert prompt["step_id"] == "model.request" and prompt["sequence"] == 0
    assert prompt["messages"] == [
        {"role": "system", "text": f"Help with orders. {XSS_IMG}"},
        {"role": "user", "text": f"Where is order A-17? {XSS_SCRIPT}"},
    ]
    assert prompt["tools"] == ["lookup", "refund"]
    turns = [e for e in conversation["entries"] if e["kind"] == "response"]
    assert [t["operation"]["sequence"] for t in turns] == [0, 1, 2]
    assert turns[0]["content"] == f"Looking it up {XSS_SCRIPT}"
    assert turns[0]["usage"]["input_tokens"] == 100
    assert turns[0]["usage_counts"] == {"input_tokens": 100, "output_tokens": 7}
    assert [(c["id"], c["name"], c["arguments"], c["state"]) for c in turns[0]["tool_calls"]] == [
        ("c-1", "lookup", {"query": XSS_CLOSE}, "answered"),
        ("c-2", "refund", {"order_id": "A-17", "amount_cents": "lots"}, "answered"),
    ]
    assert turns[2]["content"] == LONG_ANSWER and turns[2]["tool_calls"] == []
    results = {e["id"]: e for e in conversation["entries"] if e["kind"] == "tool_result"}
    assert set(results) == {"c-1", "c-2", "c-3"}
    assert results["c-1"]["result"]["echo"] == XSS_CLOSE and not results["c-1"]["is_error"]
    assert results["c-2"]["is_error"] and results["c-2"]["name"] == "refund"
    assert results["c-3"]["result"] == {"refunded": 500, "order": "A-17"}
    for call_id, result in results.items():  # each result points back at the turn that asked
        turn = next(t for t in turns if call_id in [c["id"] for c in t["tool_calls"]])
        assert result["call_seq"] == turn["seq"] and result["call_on_page"]
    seqs = [e["seq"] for e in conversation["entries"]]
    assert seqs == sorted(seqs)  # log order
    assert conversation["in_flight"] is None


def test_stored_text_is_escaped(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    for run_id in (runs.agent, runs.plain):
        page = conv_client.get(run_url(run_id)).text
        chat = section(page)
        assert html.escape(XSS_SCRIPT) in chat or "&lt;script&gt;document.title=" in chat
        assert_inert(page)  # allowed tags only, our one static script, no handler or style
    csp = conv_client.get(run_url(runs.agent)).headers["content-security-policy"]
    assert csp == "default-src 'self'"


def test_a_failed_model_request_is_marked(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    conversation = entries(conv_client, runs.failed)
    assert conversation["present"] and conversation["turns"] == 0
    (failure,) = conversation["entries"]
    assert failure["kind"] == "operation" and failure["outcome"] == "failure"
    assert failure["step_id"] == "model.request" and failure["sequence"] == 0
    assert failure["error"] == "InvalidModelResponse"
    chat = section(conv_client.get(run_url(runs.failed)).text)
    assert 'class="msg msg-op msg-error"' in chat and "InvalidModelResponse" in chat
    assert 'class="badge outcome-failure"' in chat


def test_a_model_request_in_flight_is_shown(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    conversation = entries(conv_client, runs.stuck)
    assert conversation["entries"] == [] and conversation["turns"] == 0
    assert [m["text"] for m in conversation["prompt"]["messages"]] == ["Wait.", "hold on"]
    flight = conversation["in_flight"]
    assert flight["step_id"] == "model.request" and flight["sequence"] == 0
    assert flight["attempts"] == 1 and flight["claim_owner"]
    chat = section(conv_client.get(run_url(runs.stuck)).text)
    assert 'class="msg msg-flight"' in chat and "has no stored response yet" in chat


def test_an_agent_context_run(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    conversation = entries(conv_client, runs.plain)
    assert conversation["prompt"] is None and conversation["turns"] == 2
    kinds = [(e["kind"], e.get("id")) for e in conversation["entries"]]
    assert kinds == [("response", None), ("tool_result", "p-1"), ("tool_result", "p-2")] + [
        ("response", None)
    ]
    first, _, huge, last = conversation["entries"]
    assert first["model"] == "gpt-test" and first["stop_reason"] == "tool_use"
    assert first["operation"] is None
    assert huge["result"] == HUGE_RESULT  # the API has it all
    assert [c["state"] for c in last["tool_calls"]] == ["pending"]
    chat = section(conv_client.get(run_url(runs.plain)).text)
    assert chat.count('class="msg msg-tool msg-error"') == 1
    assert "no result · in doubt" in chat and 'class="call call-pending"' in chat
    assert f"cut at {MAX_TEXT:,} of {len(HUGE_RESULT):,} characters" in chat
    assert HUGE_RESULT not in chat
    assert "gpt-test" in chat and "input tokens 12" in chat


def test_the_conversation_pages_with_the_event_log(
    conv_client: TestClient, conversations: Any
) -> None:
    _, runs = conversations
    first = entries(conv_client, runs.paged, "?after_seq=0")  # the run page opens on the latest
    second = entries(conv_client, runs.paged, f"?after_seq={EVENT_PAGE_SIZE}")
    last_turn = first["entries"][-1]
    assert last_turn["kind"] == "response" and last_turn["content"] == "three at once"
    assert [c["state"] for c in last_turn["tool_calls"]] == ["answered_later"] * 3
    assert all(c["result_seq"] > EVENT_PAGE_SIZE for c in last_turn["tool_calls"])
    assert all(e["seq"] <= EVENT_PAGE_SIZE for e in first["entries"])
    # page 2 starts among the results: each names its tool from the intent (an earlier seq)
    results = [e for e in second["entries"] if e["kind"] == "tool_result"]
    assert [r["id"] for r in results] == list(runs.boundary_calls)
    assert all(r["name"] == "step" and r["call_seq"] is not None for r in results)
    assert not any(r["call_on_page"] for r in results)
    assert second["turns"] == 0 and second["prompt"] is None
    page_one = section(conv_client.get(run_url(runs.paged) + "?page=1").text)
    target = f"?after_seq={EVENT_PAGE_SIZE}#c{last_turn['tool_calls'][0]['result_seq']}"
    assert html.escape(target) in page_one and "(a later page)" in page_one
    assert f"?after_seq={EVENT_PAGE_SIZE}#conversation" in page_one  # the pager keeps the anchor
    page_two = section(conv_client.get(run_url(runs.paged) + f"?after_seq={EVENT_PAGE_SIZE}").text)
    assert "(an earlier page)" in page_two


def test_no_section_without_a_model(conv_client: TestClient, conversations: Any) -> None:
    _, runs = conversations
    page = conv_client.get(run_url(runs.quiet)).text
    assert 'id="conversation"' not in page and 'href="#conversation"' not in page
    assert entries(conv_client, runs.quiet) == {
        "present": False,
        "turns": 0,
        "prompt": None,
        "entries": [],
        "in_flight": None,
    }


def test_a_deep_page_of_a_long_run_reads_only_that_page(big_run: tuple[Path, str]) -> None:
    path, run_id = big_run
    client = client_for(path)
    conversation = client.get(f"/api/runs/{run_id}?page=300").json()["conversation"]
    assert conversation["prompt"] is None
    seqs = [e["seq"] for e in conversation["entries"]]
    assert seqs and min(seqs) > 299 * EVENT_PAGE_SIZE and max(seqs) <= 300 * EVENT_PAGE_SIZE
    assert re.search(r'id="conversation"', client.get(run_url(run_id) + "?page=300").text)


@pytest.mark.browser
def test_the_conversation_in_a_real_browser(
    conversations: tuple[Path, Runs], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A screenshot of the conversation, and the stored payloads inert in Chromium."""
    browser = require_chromium()
    path, runs = conversations
    profile = tmp_path_factory.mktemp("profile")
    with ui_server(path, tmp_path_factory.mktemp("server")) as base:
        shot = ARTIFACTS / "conversation.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot.unlink(missing_ok=True)
        size = "--window-size=1280,2000"  # tall enough for the prompt and three turns
        done = chromium(browser, profile, f"--screenshot={shot}", size, base + run_url(runs.agent))
        assert shot.is_file(), done.stderr[-2000:]
        assert shot.read_bytes().startswith(PNG_MAGIC) and shot.stat().st_size > 50_000
        for run_id in (runs.agent, runs.plain):
            dom = dump_dom(browser, profile, base + run_url(run_id))
            title = re.search(r"<title>(.*?)</title>", dom, re.S)
            assert title is not None and title.group(1).strip().endswith("zincir inspector")
            assert "(shown in " in dom  # our static script ran, so scripts were enabled
            assert 'id="conversation"' in dom
            assert_inert(dom)
