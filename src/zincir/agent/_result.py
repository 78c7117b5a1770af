"""``AgentRunResult`` and the form a completed durable run stores it in."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import StoreError
from .._json import MAX_NESTING, checked_size, dumps, encode_part, loads_strict
from ..contract.payloads import Message, Usage, kept_json
from ._approval import PausedRun

__all__ = ["AgentRunResult", "result_from_stored", "stored_result"]


@dataclass(frozen=True, slots=True)
class AgentRunResult:
    """What a run produced: the final text, the whole conversation and the summed usage.

    ``paused`` is None when the run finished; otherwise the run waits for decisions on the
    calls it lists (``agent.resume``) and ``output`` is empty.
    """

    output: str
    messages: tuple[Message, ...]
    usage: Usage
    paused: PausedRun | None = None


def stored_result(result: AgentRunResult, run_id: str) -> str:
    """The JSON text a completed run keeps as its result: ``output``, ``messages`` and
    ``usage``, composed of the messages' kept texts (the conversation is not encoded again)."""
    messages = [kept_json(message) for message in result.messages]
    if 2 + max((depth for _, depth in messages), default=0) > MAX_NESTING:
        # The kept depths are bounds (bracket counts): let the encoder judge the real depth.
        value = {
            "output": result.output,
            "messages": [message.to_dict() for message in result.messages],
            "usage": result.usage.to_dict(),
        }
        return dumps(value, what="result", run_id=run_id)
    text = "".join(
        (
            '{"output":',
            encode_part(result.output),
            ',"messages":[',
            ",".join(text for text, _ in messages),
            '],"usage":',
            kept_json(result.usage)[0],
            "}",
        )
    )
    return checked_size(text, what="result", run_id=run_id)


def result_from_stored(text: str | None, run_id: str) -> AgentRunResult:
    """Read back a completed run's result; StoreError if it is not an agent's result."""
    try:
        data = loads_strict(text) if text is not None else None
        if not isinstance(data, dict) or not isinstance(data.get("output"), str):
            raise ValueError("no output")
        return AgentRunResult(
            output=data["output"],
            messages=tuple(Message.from_dict(item) for item in data["messages"]),
            usage=Usage.from_dict(data["usage"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise StoreError(
            f"the run is completed but its result is not an agent run's result ({error}); "
            "was this run id used by something other than an agent?",
            run_id=run_id,
        ) from None
