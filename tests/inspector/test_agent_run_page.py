"""The page of an agent run opens on its conversation; a failed run's failed tool call is
shown as failed (not in doubt), and its error is not repeated."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import client_for, seed
from zincir import SQLiteStore
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.inspector._app import run_url
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

HANDLERS = Handlers(model_request="page-model", tool_call="page-tools")
RUN = "broken-weather"


class Opaque:
    """A value no tool may return: the call fails and so does the run."""


async def seed_failed_run(store: SQLiteStore) -> str:
    @tool
    async def weather(city: str) -> Any:
        """Look the weather up."""
        return {"forecast": Opaque()}

    def model(request: ModelRequest) -> ModelResponse:
        call = ToolCallPart(tool_call_id="w-1", tool_name="weather", arguments={"city": "Oslo"})
        return ModelResponse(parts=[TextPart(text="Let me check."), call])

    agent = Agent(FunctionModel(model), name="weather", tools=[weather])
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    binding = DurableBinding(zincir.LocalRuntime(store, registry), RUN, HANDLERS)
    with pytest.raises(zincir.OperationFailed):
        await agent.run("Weather in Oslo?", durable=binding)
    run = await store.get_run(RUN)
    assert run is not None and run["status"] == "failed"
    return str(run["last_error"])


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestClient, str]:
    path: Path = tmp_path_factory.mktemp("agent-page") / "zincir.db"
    error = seed(path, seed_failed_run)
    return client_for(path), error


def test_an_agent_run_opens_on_its_conversation(failed: tuple[TestClient, str]) -> None:
    client, _ = failed
    page = client.get(run_url(RUN)).text
    sections = re.findall(r'<section id="([a-z-]+)"', page)
    assert sections[0] == "conversation", sections
    start = page.index('<nav class="sections"')
    nav = page[start : page.index("</nav>", start)]
    assert re.findall(r'href="#([a-z-]+)"', nav)[0] == "conversation"


def test_a_failed_call_is_failed_not_in_doubt(failed: tuple[TestClient, str]) -> None:
    client, _ = failed
    page = client.get(run_url(RUN)).text
    assert "in doubt" not in page and "Pending tool intents" not in page
    chat = page[page.index('<section id="conversation"') :]
    chat = chat[: chat.index("</section>")]
    assert 'class="call call-failed"' in chat
    assert 'class="badge status-failed"' in chat and "NotJsonSerializable" in chat
    detail = client.get(f"/api/runs/{RUN}").json()
    assert detail["pending_tools"] == []
    conversation = detail["conversation"]
    (failure,) = [e for e in conversation["entries"] if e["kind"] == "operation"]
    assert failure["call_id"] == "w-1" and failure["on_call"] is True
    (turn,) = [e for e in conversation["entries"] if e["kind"] == "response"]
    (call,) = turn["tool_calls"]
    assert call["state"] == "failed" and call["failure"]["error"] == "NotJsonSerializable"
    (intent,) = [e["seq"] for e in detail["events"] if e["type"] == "tool_call"]
    assert f'<li id="e{intent}" class="event flag-failed">' in page  # in the event log too


def test_the_error_is_shown_once(failed: tuple[TestClient, str]) -> None:
    client, error = failed
    assert error.count("NotJsonSerializable") == 1, error  # the stored error names it once
    page = client.get(run_url(RUN)).text
    before_records = page[: page.index('<section id="operations"')]
    assert before_records.count("holds a ") == 1  # in the run's error, not again on the call
    assert "Last error" in before_records
