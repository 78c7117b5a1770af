"""``AgentRunResult`` and the form a completed durable run stores it in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import StoreError
from .._json import loads_strict
from ..contract.payloads import Message, Usage
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


def stored_result(result: AgentRunResult) -> dict[str, Any]:
    """The JSON value a completed run keeps as its result."""
    return {
        "output": result.output,
        "messages": [message.to_dict() for message in result.messages],
        "usage": result.usage.to_dict(),
    }


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
