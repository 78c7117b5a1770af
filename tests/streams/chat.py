"""The agent of the stream tests, on OpenAIChatModel, and its scripted streamed replies."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.agent.openai_server import API_KEY, Reply, call_delta, chunk, usage
from zincir.agent import Agent, tool
from zincir.agent._openai import OpenAIChatModel
from zincir.payloads import Message, ModelResponse, ToolReturnPart
from zincir.streams import StreamItem

PROMPT = "What is the weather in Oslo?"
ANSWER_WORDS = 200


@tool
async def lookup(city: str) -> dict[str, Any]:
    """Look up the weather of a city."""
    return {"city": city, "sky": "clear"}


def agent(client: openai.AsyncOpenAI) -> Agent:
    return Agent(OpenAIChatModel("gpt-test", client), name="weather", tools=[lookup])


def client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)


def answer(words: int = ANSWER_WORDS) -> list[str]:
    """The final answer's pieces, one a chunk."""
    return [f"w{index} " for index in range(words)]


def call_reply() -> Reply:
    """Model request 0: a streamed call of ``lookup``."""
    return Reply(
        chunks=[
            chunk({"role": "assistant"}),
            chunk(call_delta(0, '{"ci', "call-oslo", "lookup")),
            chunk(call_delta(0, 'ty": "Oslo"}')),
            chunk(finish_reason="tool_calls"),
            chunk(usage_=usage(10, 4)),
        ]
    )


def text_reply(pieces: list[str], *, stall_after: int | None = None) -> Reply:
    """A streamed text answer, a chunk per piece (stalled after ``stall_after`` chunks)."""
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces]
    chunks += [chunk(finish_reason="stop"), chunk(usage_=usage(20, len(pieces)))]
    return Reply(chunks=chunks, stall_after=stall_after)


class Folded:
    """A client of the stream: deltas build a partial answer per model request, ``void``
    drops it, ``message`` replaces it; tool results follow."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.partial: dict[int, dict[int, list[str]]] = {}
        self.voided: list[str] = []  # the text each void dropped
        self.result: dict[str, Any] | None = None

    def apply(self, item: StreamItem) -> None:
        kind, payload = item.kind, item.payload
        if kind == "part_start":
            self.partial.setdefault(payload["request"], {})[payload["index"]] = []
        elif kind == "part_delta":
            self.partial[payload["request"]][payload["index"]].append(payload["delta"])
        elif kind == "part_end":
            assert payload["index"] in self.partial[payload["request"]]
        elif kind == "void":
            dropped = self.partial.pop(payload["request"], {})
            self.voided.append("".join("".join(p) for _, p in sorted(dropped.items())))
        elif kind == "message":
            self.partial.pop(payload["request"], None)
            response = ModelResponse.from_dict(payload["response"])
            self.messages.append(Message(role="assistant", parts=tuple(response.parts)))
        elif kind == "tool_result":
            part = ToolReturnPart(
                tool_call_id=payload["tool_call_id"],
                tool_name=payload["tool_name"],
                content=payload["content"],
                is_error=payload["is_error"],
            )
            self.messages.append(Message(role="tool", parts=(part,)))
        elif kind == "result":
            self.result = payload

    def text(self, request: int) -> str:
        """The partial text of ``request`` as a client shows it now."""
        return "".join("".join(p) for _, p in sorted(self.partial.get(request, {}).items()))


def fold(items: list[StreamItem]) -> Folded:
    folded = Folded()
    for item in items:
        folded.apply(item)
    return folded


def after_prompt(messages: tuple[Message, ...] | list[Message]) -> list[Message]:
    """A run's conversation after its prompt: what its stream carries."""
    return list(messages)[1:]


def dump(messages: tuple[Message, ...]) -> str:
    return json.dumps([message.model_dump(mode="json") for message in messages])


def load(text: str) -> list[Message]:
    return [Message.model_validate(one) for one in json.loads(text)]
