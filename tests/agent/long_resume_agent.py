"""A long run for the resume tests: each turn the model asks for one section of a catalogue
(usage counted per response), until ``turns`` sections are read; some turns can go wrong on
purpose. Run as a script it is the process a test kills:

    python long_resume_agent.py TARGET RUN_ID TURNS LOG --hang model|tool --at N
                                [--reject K ...] [--approve K ...] [--workflow] [--stream]
                                [--bad-refund K ...]

It runs the agent through a ``Runner`` (lease 60 s; ``run_stream`` with ``--stream``) and,
at turn ``N``, prints ``asked N`` (the model is asked for request N) or ``inside N`` (the
tool reads section N) and sleeps until it is killed. Without ``--hang`` it prints
``output <text>`` or ``paused <ids>``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from zincir.agent import Agent, FunctionModel, Runner, Tool, ToolOrigin, tool  # noqa: E402
from zincir.contract.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextPart,
    ToolCallPart,
    Usage,
    stream_parts,
)

PROMPT = "Read the catalogue, one section a turn."
INSTRUCTIONS = "You read catalogues."
LEASE_TTL = timedelta(seconds=60)


def note(log: Path | None, line: str) -> None:
    """Append one line to ``log`` (each call the agent really makes)."""
    if log is not None:
        with open(log, "a", encoding="utf-8") as file:
            file.write(line + "\n")


def lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def section_text(number: int) -> str:
    return f"Section {number}: " + "items in stock. " * 20


def build(
    turns: int,
    log: Path | None = None,
    *,
    hang: str | None = None,
    at: int = -1,
    reject: Iterable[int] = (),
    approve: Iterable[int] = (),
    instructions: str = INSTRUCTIONS,
    description: str = "Read one section of the catalogue.",
    workflow: bool = False,
    bad_refund: Iterable[int] = (),
) -> Agent:
    """The agent: request N asks for section N + 1, except on a turn in ``reject`` (a call
    whose arguments fail the schema: a retry prompt) and in ``approve`` (a refund that needs
    approval); request ``turns`` answers. ``hang`` ("model" or "tool") stops the process at
    turn ``at`` until it is killed. ``workflow`` offers a tool that runs in the agent's
    process too (never called). On a turn in ``bad_refund`` the refund's arguments fail
    its schema."""
    rejected, approved, bad = set(reject), set(approve), set(bad_refund)

    def stop(what: str, number: int) -> None:
        sys.stdout.write(f"{what} {number}\n")
        sys.stdout.flush()
        time.sleep(3600)

    async def read_section(section: int) -> str:
        if hang == "tool" and section == at:
            stop("inside", section)
        note(log, f"tool {section}")
        return section_text(section)

    async def refund(section: int) -> str:
        note(log, f"refund {section}")
        return f"refunded {section}"

    reader = Tool(read_section, name="read_section", description=description)
    refunder = tool(name="refund", requires_approval=True)(refund)

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        if hang == "model" and number == at:
            stop("asked", number)
        note(log, f"model {number}")
        usage = Usage(
            input_tokens=len(request.messages), output_tokens=number + 1, details={"turns": 1}
        )
        if number >= turns:
            return ModelResponse(parts=[TextPart(text=f"read {number} turns")], usage=usage)
        name, arguments = "read_section", {"section": number}
        if number in rejected:
            arguments = {"section": "not a number"}
        elif number in approved:
            name = "refund"
        elif number in bad:
            name, arguments = "refund", {"section": "not a number"}
        call = ToolCallPart(tool_call_id=f"c-{number}", tool_name=name, arguments=arguments)
        return ModelResponse(parts=[TextPart(text=f"Turn {number}."), call], usage=usage)

    async def remember(note: str) -> str:
        return note

    tools = [reader, refunder]
    if workflow:
        tools.append(Tool(remember, name="remember", origin=ToolOrigin.WORKFLOW))

    async def streamed(request: ModelRequest) -> AsyncIterator[StreamPart]:
        for part in stream_parts(model(request)):
            yield part

    return Agent(
        FunctionModel(model, streamed),
        name="catalogue",
        instructions=instructions,
        tools=tools,
        tool_retries=50,
    )


async def main(args: argparse.Namespace) -> None:
    agent = build(
        args.turns,
        Path(args.log),
        hang=args.hang,
        at=args.at,
        reject=args.reject,
        approve=args.approve,
        workflow=args.workflow,
        bad_refund=args.bad_refund,
    )
    async with Runner(args.target, [agent], lease_ttl=LEASE_TTL) as runner:
        if args.stream:
            stream = runner.run_stream(agent, PROMPT, run_id=args.run_id)
            async for _ in stream:
                pass
            result = stream.result
        else:
            result = await runner.run(agent, PROMPT, run_id=args.run_id)
    if result.paused is not None:
        sys.stdout.write(f"paused {' '.join(c.call_id for c in result.paused.calls)}\n")
    else:
        sys.stdout.write(f"output {result.output}\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("run_id")
    parser.add_argument("turns", type=int)
    parser.add_argument("log")
    parser.add_argument("--hang", choices=["model", "tool"])
    parser.add_argument("--at", type=int, default=-1)
    parser.add_argument("--reject", type=int, action="append", default=[])
    parser.add_argument("--approve", type=int, action="append", default=[])
    parser.add_argument("--workflow", action="store_true")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--bad-refund", type=int, action="append", default=[])
    asyncio.run(main(parser.parse_args()))
