"""A 1,000-turn durable agent run written fast: the rows the agent loop writes, through the
store's own append API.

Each turn is what ``zincir.agent`` stores for it: a ``model.request`` operation whose record
is logged with its ``llm_call`` and ``tool_call`` events, then a ``tool.call`` operation
logged with its ``tool_result`` (``Store.finish_operation`` under the run's lease), about
2 KB of new text a turn. The last call fails (NotJsonSerializable) and fails the run.
A model request's input holds the prompt and the last few messages, not the whole
conversation: written whole, 1,000 turns cost O(turns²) bytes in today's format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from zincir import AgentContext, ToolCall
from zincir.contract import Failure, Invocation, Record, Success, encode_record
from zincir.durable._operations import new_operation, stored_outcome
from zincir.runs._entries import response_entry, tool_result_entry
from zincir.store import LogEntry, Store

RUN = "long-agent-run"
HANDLER = "long"
INSTRUCTIONS = "You keep a long research log; answer with a note per turn."
PROMPT = "Survey the sources, one note a turn."
WINDOW = 6  # messages of the conversation each stored input keeps after the prompt
FAILED_ERROR = "NotJsonSerializable"


@dataclass(frozen=True)
class LongRun:
    run_id: str
    turns: int
    failed_call: str


def turn_text(turn: int) -> str:
    """The model's text of ``turn``: about 1 KB."""
    return f"Turn {turn}: reading source {turn}. " + ("The findings hold up well. " * 40)[:1000]


def result_text(turn: int, size: int = 1000) -> str:
    """The tool's result of ``turn``: about ``size`` characters (1 KB by default)."""
    return f"note {turn} saved: " + ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def call_id(turn: int) -> str:
    return f"call-{turn}"


def _text(role: str, text: str) -> dict[str, object]:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


def _request(turn: int, size: int) -> str:
    """The input of model request ``turn``: the prompt and the last WINDOW messages."""
    history: list[dict[str, object]] = []
    for earlier in range(max(turn - WINDOW // 2, 0), turn):
        call = {
            "type": "tool_call",
            "tool_call_id": call_id(earlier),
            "tool_name": "note",
            "arguments": {"n": earlier},
        }
        history.append(
            {"role": "assistant", "parts": [_text("", turn_text(earlier))["parts"][0], call]}
        )  # type: ignore[index]
        history.append(
            {
                "role": "tool",
                "parts": [
                    {
                        "type": "tool_return",
                        "tool_call_id": call_id(earlier),
                        "tool_name": "note",
                        "content": result_text(earlier, size),
                    }
                ],
            }
        )
    document = {
        "version": 1,
        "model": "function",
        "messages": [_text("system", INSTRUCTIONS), _text("user", PROMPT), *history],
        "tools": [{"name": "note", "description": "Save a note.", "parameters": {}}],
        "metadata": {},
    }
    return json.dumps(document, separators=(",", ":"))


def _response(turn: int) -> str:
    parts = [
        {"type": "text", "text": turn_text(turn)},
        {
            "type": "tool_call",
            "tool_call_id": call_id(turn),
            "tool_name": "note",
            "arguments": {"n": turn},
        },
    ]
    return json.dumps({"version": 1, "parts": parts, "finish_reason": "tool_calls"})


async def _finish(
    store: Store,
    ctx: AgentContext,
    invocation: Invocation,
    outcome: Success | Failure,
    log: list[LogEntry],
) -> None:
    record = Record.for_invocation(invocation, outcome)
    await store.finish_operation(
        new_operation(invocation),
        stored_outcome(record, encode_record(record)),
        owner=ctx.lease_owner,
        lease=ctx.lease,
        log=log,
    )


async def seed_long_run(store: Store, turns: int = 1000, result_size: int = 1000) -> LongRun:
    """A failed agent run of ``turns`` turns, each a model request and a tool call whose
    result is ``result_size`` characters."""
    ctx = await AgentContext.create(
        store, name="researcher", run_id=RUN, config={"agent": "researcher", "prompt": PROMPT}
    )
    for turn in range(turns):
        model = Invocation(
            RUN,
            "model.request",
            turn,
            "model_request",
            f"{HANDLER}.model-request",
            _request(turn, result_size),
        )
        entry = response_entry(
            RUN,
            turn_text(turn),
            [ToolCall(call_id(turn), "note", {"n": turn})],
            "tool_calls",
            usage={"input_tokens": 1000 + turn, "output_tokens": 250},
            model="function",
        )
        await _finish(store, ctx, model, Success(_response(turn)), [entry])
        tool_input = json.dumps(
            {
                "version": 1,
                "call": {
                    "type": "tool_call",
                    "tool_call_id": call_id(turn),
                    "tool_name": "note",
                    "arguments": {"n": turn},
                },
                "arguments": {"n": turn},
                "context": {
                    "run_id": RUN,
                    "step": turn,
                    "agent_name": "researcher",
                    "metadata": {},
                },
                "retry": 0,
                "approval": None,
            },
            separators=(",", ":"),
        )
        tool = Invocation(
            RUN, "tool.call", turn * 1000, "tool_call", f"{HANDLER}.tool-call", tool_input
        )
        if turn == turns - 1:
            failure = Failure(
                FAILED_ERROR, False, f"the result of tool call {call_id(turn)!r} holds a Opaque"
            )
            await _finish(store, ctx, tool, failure, [])
            await ctx.fail(f"tool call {call_id(turn)!r} failed: {FAILED_ERROR}")
            return LongRun(RUN, turns, call_id(turn))
        output = json.dumps(
            {
                "version": 1,
                "tool_call_id": call_id(turn),
                "tool_name": "note",
                "content": result_text(turn, result_size),
                "is_error": False,
            }
        )
        await _finish(
            store,
            ctx,
            tool,
            Success(output),
            [tool_result_entry(RUN, call_id(turn), result_text(turn, result_size))],
        )
    raise AssertionError("unreachable: the last turn fails the run")
