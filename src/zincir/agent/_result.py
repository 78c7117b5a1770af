"""``AgentRunResult`` and the form a completed durable run stores it in."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import NotJsonSerializable, StoreError
from .._json import loads_strict
from ..contract.payloads import Message, RunResult, Usage
from ._approval import PausedRun

__all__ = ["AgentRunResult", "result_from_stored", "stored_result"]


@dataclass(frozen=True, slots=True)
class AgentRunResult:
    """What a run produced: the final text, the whole conversation and the summed usage.

    ``paused`` is None when the run finished; otherwise the run waits for decisions on the
    calls it lists (``agent.resume``) and ``output`` is empty. ``run_id`` names the durable
    run that produced it (None for a run without ``durable=``).
    """

    output: str
    messages: tuple[Message, ...]
    usage: Usage
    paused: PausedRun | None = None
    run_id: str | None = None


def stored_result(result: AgentRunResult, run_id: str) -> str:
    """The JSON text a completed run keeps as its result (``output``, ``messages``,
    ``usage``): the messages already sent in requests are not encoded again."""
    document = RunResult(output=result.output, messages=result.messages, usage=result.usage)
    try:
        return document.to_json()
    except NotJsonSerializable as error:
        raise NotJsonSerializable(error.detail, run_id=run_id) from None


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
            run_id=run_id,
        )
    except (ValueError, KeyError, TypeError) as error:
        raise StoreError(
            f"the run is completed but its result is not an agent run's result ({error}); "
            "was this run id used by something other than an agent?",
            run_id=run_id,
        ) from None
