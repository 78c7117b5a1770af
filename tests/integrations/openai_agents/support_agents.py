"""The agents of the OpenAI Agents SDK tests: a triage agent handing off to billing, whose
tools append each call to a log file (fsynced), on the real SDK's chat-completions model
pointed at the scripted server (tests/agent/openai_server.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.agent.openai_server import API_KEY, Reply, completion, tool_call

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
set_tracing_disabled(True)  # nothing of the tests' runs leaves for OpenAI's trace endpoint

PROMPT = "Refund order A-17."
ANSWER = "Refunded 4200 cents for A-17."


def append(log: Path, line: str) -> None:
    with log.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def model(server: str | AsyncOpenAI) -> OpenAIChatCompletionsModel:
    """The SDK's chat-completions model on the scripted server (its base URL, or a client
    of it the test closes)."""
    client = (
        server
        if isinstance(server, AsyncOpenAI)
        else AsyncOpenAI(base_url=server, api_key=API_KEY, max_retries=0)
    )
    return OpenAIChatCompletionsModel(model="gpt-test-2026", openai_client=client)


def support(
    server: str | AsyncOpenAI,
    log: Path,
    *,
    kill_in: str | None = None,
    approve_refund: bool = False,
) -> Agent[Any]:
    """triage → billing (lookup, refund); ``kill_in`` names a tool that SIGKILLs its own
    process once it logged that it started."""

    @function_tool
    def lookup(order: str) -> str:
        """Look an order up."""
        append(log, f"tool lookup {order}")
        if kill_in == "lookup":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"order {order}: paid 4200 cents"

    @function_tool(needs_approval=approve_refund)
    def refund(order: str, cents: int) -> str:
        """Refund an order."""
        append(log, f"tool refund {order} started")
        if kill_in == "refund":
            os.kill(os.getpid(), signal.SIGKILL)
        append(log, f"tool refund {order} done")
        return f"refunded {cents} cents"

    chat = model(server)
    billing = Agent(
        name="billing", instructions="Handle refunds.", model=chat, tools=[lookup, refund]
    )
    return Agent(name="triage", instructions="Route the customer.", model=chat, handoffs=[billing])


def script() -> list[Reply]:
    """The four model replies of a support run: hand off, look up, refund, answer."""
    return [
        Reply(body=completion(None, [tool_call("h-1", "transfer_to_billing", "{}")])),
        Reply(body=completion(None, [tool_call("c-1", "lookup", '{"order":"A-17"}')])),
        Reply(body=completion(None, [tool_call("c-2", "refund", '{"order":"A-17","cents":4200}')])),
        Reply(body=completion(ANSWER)),
    ]
