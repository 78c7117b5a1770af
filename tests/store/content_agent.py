"""A long conversation for the content-storage tests: a ``FunctionModel`` agent with one
tool whose results are a few hundred characters, run for a given number of turns, then
answering. Run as a script it is the worker a crash test kills (``ZINCIR_CRASH_AT``):

    python content_agent.py TARGET RUN_ID TURNS LOG
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import zincir
from zincir.agent import Agent, AgentRunResult, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.contract.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

HANDLERS = Handlers(model_request="content-model", tool_call="content-tools")
PROMPT = "Read every section of the catalogue, one a turn."


def section_text(number: int, size: int = 400) -> str:
    """A tool result: deterministic text of ``size`` characters for section ``number``."""
    line = f"section {number}: items {number * 7} to {number * 7 + 6}, all in stock. "
    return (line * (size // len(line) + 1))[:size]


class Stop(BaseException):
    """Raised by the model to stop the process's run where it stands, as a kill would."""


def build(
    turns: int,
    size: int = 400,
    called: Callable[[str], None] | None = None,
    stop_at: int | None = None,
) -> Agent:
    """The agent: each turn one model request and one tool call, for ``turns`` turns; with
    ``stop_at`` the model raises :class:`Stop` when asked after that many turns."""
    note = called or (lambda _: None)

    @tool(name="read_section")
    async def read_section(section: int) -> str:
        """Read one section of the catalogue."""
        note(f"tool {section}")
        return section_text(section, size)

    def model(request: ModelRequest) -> ModelResponse:
        done = (len(request.messages) - 1) // 2
        if done == stop_at:
            raise Stop(done)
        note(f"model {done}")
        if done >= turns:
            return ModelResponse(parts=[TextPart(text=f"read {done} sections")])
        number = done + 1
        return ModelResponse(
            parts=[
                TextPart(text=f"Reading section {number}."),
                ToolCallPart(
                    tool_call_id=f"call-{number}",
                    tool_name="read_section",
                    arguments={"section": number},
                ),
            ]
        )

    return Agent(FunctionModel(model), name="catalogue", tools=[read_section])


def binding(store: zincir.Store, agent: Agent, run_id: str) -> DurableBinding:
    """The agent bound to ``store`` under ``run_id`` through a LocalRuntime."""
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry, max_input_bytes=None)
    return DurableBinding(runtime, run_id, HANDLERS)


async def run(
    target: str | Path,
    run_id: str,
    turns: int,
    called: Callable[[str], None] | None = None,
    stop_at: int | None = None,
) -> AgentRunResult:
    """Run (or replay and continue) the conversation ``run_id`` on the store at ``target``."""
    store = zincir.open_store(str(target))
    try:
        return await run_on(store, run_id, turns, called, stop_at)
    finally:
        await store.close()


async def run_on(
    store: zincir.Store,
    run_id: str,
    turns: int,
    called: Callable[[str], None] | None = None,
    stop_at: int | None = None,
    size: int = 400,
) -> AgentRunResult:
    """:func:`run` on an open store (tool results of ``size`` characters)."""
    agent = build(turns, size, called=called, stop_at=stop_at)
    deadline = time.monotonic() + 30
    while True:
        try:
            return await agent.run(PROMPT, durable=binding(store, agent, run_id))
        except zincir.LeaseHeld:  # a stopped or killed owner's lease lapses first
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def stop(store: zincir.Store, run_id: str, turns: int) -> None:
    """Run ``turns`` turns of ``run_id`` and stop before the next model request."""
    try:
        await run_on(store, run_id, turns, stop_at=turns)
    except Stop:
        pass


def main() -> None:
    target, run_id, turns, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    def called(line: str) -> None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    result = asyncio.run(run(target, run_id, turns, called))
    print(result.output)


if __name__ == "__main__":
    main()
