"""OpenAIChatModel against a local server that speaks the chat-completions protocol."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import openai
import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.openai_server import (
    API_KEY,
    ChatServer,
    Reply,
    call_delta,
    chunk,
    completion,
    error,
    tool_call,
    usage,
)
from zincir.agent import Agent, tool
from zincir.agent._openai import OpenAIChatModel, ProviderError, retry_after
from zincir.agent._stream import assemble_stream
from zincir.payloads import (
    Message,
    ModelRequest,
    ModelSettings,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolCallPart,
    ToolDefinition,
    ToolReturnPart,
    Usage,
)

LOOKUP = ToolDefinition(
    name="lookup_order",
    description="Find an order.",
    parameters={
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
)

CALL_A = ToolCallPart(
    tool_call_id="call_a", tool_name="lookup_order", arguments={"order_id": "A-17"}
)
CALL_B = ToolCallPart(
    tool_call_id="call_b", tool_name="lookup_order", arguments={"order_id": "B-2"}
)


def model(server: ChatServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", server.client(), **kwargs)


def ask(text: str, *, system: str | None = "Be brief.", **kwargs: Any) -> ModelRequest:
    messages = [Message(role="user", parts=[TextPart(text=text)])]
    if system is not None:
        messages.insert(0, Message(role="system", parts=[TextPart(text=system)]))
    return ModelRequest(model="gpt-test", messages=messages, **kwargs)


async def collect(parts: AsyncIterator[StreamPart]) -> list[StreamPart]:
    return [part async for part in parts]


# -- buffered requests ---------------------------------------------------------------------


async def test_text_answer_maps_request_settings_and_response(server: ChatServer) -> None:
    server.script(
        Reply(
            completion(
                "Order A-17 shipped.",
                usage_=usage(
                    12,
                    7,
                    prompt_tokens_details={"cached_tokens": 4, "audio_tokens": 0},
                    completion_tokens_details={"reasoning_tokens": 3},
                ),
            )
        )
    )
    defaults = ModelSettings(temperature=0.5, max_tokens=99, extra_body={"user_tier": "free"})
    settings = ModelSettings(
        max_tokens=64,
        seed=7,
        stop_sequences=["END"],
        extra_headers={"X-Trace": "t-1"},
        extra_body={"service_tier": "flex"},
    )
    response = await model(server, settings=defaults).request(
        ask("Where is A-17?", settings=settings)
    )

    assert response.parts == (TextPart(text="Order A-17 shipped."),)
    assert response.usage == Usage(
        input_tokens=12, output_tokens=7, cache_read_tokens=4, details={"reasoning_tokens": 3}
    )
    assert response.finish_reason == "stop"
    assert response.model_name == "gpt-test-2026"
    assert response.provider_response_id == "chatcmpl-1"
    [received] = server.received
    assert received.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is A-17?"},
        ],
        "max_tokens": 64,
        "temperature": 0.5,
        "seed": 7,
        "stop": ["END"],
        "user_tier": "free",
        "service_tier": "flex",
    }
    # The credential lives in the client: sent as a header, never part of the document.
    assert received.headers["authorization"] == f"Bearer {API_KEY}"
    assert received.headers["x-trace"] == "t-1"
    assert API_KEY not in ask("x", settings=settings).to_json()


async def test_two_tool_calls_and_the_whole_conversation(server: ChatServer) -> None:
    server.script(
        Reply(
            completion(
                None,
                [
                    tool_call("call_a", "lookup_order", '{"order_id": "A-17"}'),
                    tool_call("call_b", "lookup_order", '{"order_id": "B-2"}'),
                ],
                finish_reason="tool_calls",
            )
        )
    )
    conversation = [
        Message(role="system", parts=[TextPart(text="Help with orders.")]),
        Message(role="user", parts=[TextPart(text="A-17 and B-2?")]),
        Message(
            role="assistant",
            parts=[
                TextPart(text="Looking."),
                ToolCallPart(tool_call_id="c0", tool_name="lookup_order", arguments={"x": 1}),
            ],
        ),
        Message(
            role="tool",
            parts=[
                ToolReturnPart(
                    tool_call_id="c0", tool_name="lookup_order", content={"status": "lost"}
                )
            ],
        ),
        Message(
            role="tool",
            parts=[
                ToolReturnPart(
                    tool_call_id="c1", tool_name="lookup_order", content="bad id", is_error=True
                )
            ],
        ),
    ]
    request = ModelRequest(
        model="gpt-test",
        messages=conversation,
        tools=[LOOKUP, ToolDefinition(name="ping", strict=True)],
        settings=ModelSettings(parallel_tool_calls=True),
    )
    response = await model(server).request(request)

    assert response.parts == (
        ToolCallPart(
            tool_call_id="call_a", tool_name="lookup_order", arguments={"order_id": "A-17"}
        ),
        ToolCallPart(
            tool_call_id="call_b", tool_name="lookup_order", arguments={"order_id": "B-2"}
        ),
    )
    assert response.finish_reason == "tool_calls"
    body = server.bodies[0]
    assert body["messages"] == [
        {"role": "system", "content": "Help with orders."},
        {"role": "user", "content": "A-17 and B-2?"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"x":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": '{"status":"lost"}'},
        {"role": "tool", "tool_call_id": "c1", "content": "bad id"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order.",
                "parameters": LOOKUP.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "ping",
                "parameters": {"type": "object", "properties": {}},
                "strict": True,
            },
        },
    ]
    assert body["parallel_tool_calls"] is True


@pytest.mark.parametrize("arguments", ['{"order_id": "A-', '["A-17"]'])
async def test_malformed_tool_arguments_are_kept_as_the_models_text(
    server: ChatServer, arguments: str
) -> None:
    server.script(Reply(completion(None, [tool_call("call_a", "lookup_order", arguments)])))
    response = await model(server).request(ask("go"))
    assert response.parts == (
        ToolCallPart(
            tool_call_id="call_a", tool_name="lookup_order", malformed_arguments=arguments
        ),
    )


# -- streaming ------------------------------------------------------------------------------

STREAM_USAGE = usage(20, 9, prompt_tokens_details={"cached_tokens": 2})


def stream_chunks() -> list[dict[str, Any]]:
    """Text, then two tool calls whose arguments arrive split across chunks, then usage."""
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me "}),
        chunk({"content": "check."}),
        chunk(call_delta(0, "", call_id="call_a", name="lookup_order")),
        chunk(call_delta(0, '{"order')),
        chunk(call_delta(0, '_id": "A-')),
        chunk(call_delta(0, '17"}')),
        chunk(call_delta(1, '{"order_id"', call_id="call_b", name="lookup_order")),
        chunk(call_delta(1, ': "B-2"}')),
        chunk(finish_reason="tool_calls"),
        chunk(usage_=STREAM_USAGE),
    ]


async def test_stream_yields_normalised_parts_and_usage(server: ChatServer) -> None:
    server.script(Reply(chunks=stream_chunks()))
    request = ask("A-17 and B-2?", tools=[LOOKUP])
    parts = await collect(model(server).stream(request))

    def start(index: int, call_id: str) -> PartStart:
        return PartStart(
            index=index, part_kind="tool_call", tool_call_id=call_id, tool_name="lookup_order"
        )

    assert parts == [
        PartStart(index=0, part_kind="text"),
        PartDelta(index=0, delta="Let me "),
        PartDelta(index=0, delta="check."),
        PartEnd(index=0),
        start(1, "call_a"),
        PartDelta(index=1, delta='{"order'),
        PartDelta(index=1, delta='_id": "A-'),
        PartDelta(index=1, delta='17"}'),
        start(2, "call_b"),
        PartDelta(index=2, delta='{"order_id"'),
        PartDelta(index=2, delta=': "B-2"}'),
        PartEnd(index=1),
        PartEnd(index=2),
        StreamUsage(
            usage=Usage(input_tokens=20, output_tokens=9, cache_read_tokens=2),
        ),
    ]
    body = server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "lookup_order"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


async def test_two_chunkings_assemble_to_the_same_parts(server: ChatServer) -> None:
    whole = [
        chunk({"content": "Let me check."}),
        chunk(call_delta(0, '{"order_id": "A-17"}', call_id="call_a", name="lookup_order")),
        chunk(call_delta(1, '{"order_id": "B-2"}', call_id="call_b", name="lookup_order")),
        chunk(finish_reason="tool_calls", usage_=STREAM_USAGE),
    ]
    server.script(Reply(chunks=stream_chunks()), Reply(chunks=whole))
    first = await assemble_stream(model(server).stream(ask("go")))
    second = await assemble_stream(model(server).stream(ask("go")))
    assert first == second
    assert first[0] == [
        TextPart(text="Let me check."),
        ToolCallPart(
            tool_call_id="call_a", tool_name="lookup_order", arguments={"order_id": "A-17"}
        ),
        ToolCallPart(
            tool_call_id="call_b", tool_name="lookup_order", arguments={"order_id": "B-2"}
        ),
    ]


async def test_stream_name_after_arguments_and_missing_id(server: ChatServer) -> None:
    """A server that names the tool after the first fragment and sends no call id."""
    server.script(
        Reply(
            chunks=[
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1'}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "}"}}]}),
                chunk(finish_reason="tool_calls"),
            ]
        )
    )
    parts = await collect(model(server).stream(ask("go")))
    assert parts == [
        PartStart(index=0, part_kind="tool_call", tool_call_id="call_0", tool_name="f"),
        PartDelta(index=0, delta='{"a":1'),
        PartDelta(index=0, delta="}"),
        PartEnd(index=0),
        StreamUsage(usage=Usage()),
    ]


async def test_stream_malformed_arguments_are_kept_as_the_models_text(
    server: ChatServer,
) -> None:
    server.script(
        Reply(
            chunks=[
                chunk(call_delta(0, '{"order_id": ', call_id="call_a", name="lookup_order")),
                chunk(finish_reason="tool_calls"),
            ]
        )
    )
    parts, _ = await assemble_stream(model(server).stream(ask("go")))
    assert parts == [
        ToolCallPart(
            tool_call_id="call_a", tool_name="lookup_order", malformed_arguments='{"order_id": '
        )
    ]


# -- errors ---------------------------------------------------------------------------------


async def test_an_error_event_in_the_stream(server: ChatServer) -> None:
    server.script(Reply(chunks=[chunk({"content": "Hel"}), {"error": {"message": "overloaded"}}]))
    with pytest.raises(ProviderError) as caught:
        await collect(model(server).stream(ask("go")))
    assert caught.value.error == "ProviderError" and not caught.value.retryable
    assert "overloaded" in caught.value.message


async def test_rate_limit_is_retryable_with_retry_after(server: ChatServer) -> None:
    server.script(error(429, "Rate limit reached", {"Retry-After": "2", "x-request-id": "req-9"}))
    with pytest.raises(zincir.OperationFailed) as caught:
        await model(server).request(ask("go"))
    failure = caught.value
    assert isinstance(failure, ProviderError)
    assert (failure.error, failure.retryable, failure.retry_after) == ("RateLimited", True, 2.0)
    assert failure.status_code == 429
    assert failure.message == "HTTP 429, request id req-9: Rate limit reached (Retry-After: 2 s)"
    assert len(server.received) == 1


async def test_rate_limit_while_streaming(server: ChatServer) -> None:
    server.script(error(429, "Rate limit reached", {"retry-after-ms": "1500"}))
    with pytest.raises(ProviderError) as caught:
        await collect(model(server).stream(ask("go")))
    assert (caught.value.error, caught.value.retry_after) == ("RateLimited", 1.5)


@pytest.mark.parametrize(
    ("status", "name", "retryable"),
    [
        (400, "ProviderBadRequest", False),
        (401, "ProviderAuthenticationFailed", False),
        (404, "ProviderNotFound", False),
        (422, "ProviderRejected", False),
        (503, "ProviderUnavailable", True),
    ],
)
async def test_status_errors(server: ChatServer, status: int, name: str, retryable: bool) -> None:
    server.script(error(status, "no such thing", {"Retry-After": "3"}))
    with pytest.raises(ProviderError) as caught:
        await model(server).request(ask("go"))
    assert (caught.value.error, caught.value.retryable) == (name, retryable)
    assert caught.value.retry_after == (3.0 if retryable else None)
    assert f"HTTP {status}" in caught.value.message and "no such thing" in caught.value.message


async def test_bad_request_is_not_retryable(server: ChatServer) -> None:
    server.script(error(400, "Invalid schema for function 'lookup_order'"))
    with pytest.raises(zincir.OperationFailed) as caught:
        await model(server).request(ask("go", tools=[LOOKUP]))
    assert caught.value.error == "ProviderBadRequest" and not caught.value.retryable
    assert "Invalid schema" in caught.value.message
    assert server.bodies[0]["tools"][0]["function"]["name"] == "lookup_order"


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0
    )
    with pytest.raises(ProviderError) as caught:
        await OpenAIChatModel("gpt-test", client).request(ask("go"))
    await client.close()
    assert caught.value.error == "ProviderUnavailable" and caught.value.retryable
    assert caught.value.retry_after is None


def test_retry_after_forms() -> None:
    later = datetime.now(UTC) + timedelta(seconds=30)
    assert retry_after({"Retry-After": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 25 < (retry_after({"Retry-After": format_datetime(later, usegmt=True)}) or 0) <= 30
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after({"Retry-After": "-1"}) is None
    assert retry_after({}) is None


# -- construction ---------------------------------------------------------------------------


async def test_default_client_is_created_lazily_from_the_environment(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    chat = OpenAIChatModel("gpt-test")
    assert chat._client is None and chat.name == "gpt-test"
    server.script(Reply(completion("hi")))
    response = await chat.request(ask("go"))
    await chat.close()
    assert chat._client is None
    assert response.parts == (TextPart(text="hi"),)
    assert server.received[0].headers["authorization"] == "Bearer sk-from-env"


def test_invalid_arguments() -> None:
    with pytest.raises(zincir.InvalidInput):
        OpenAIChatModel("")
    with pytest.raises(zincir.InvalidInput):
        OpenAIChatModel("gpt-test", client=object())  # type: ignore[arg-type]


def test_missing_sdk_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['openai'] = None\n"
        "from zincir.agent._openai import OpenAIChatModel\n"
        "try:\n    OpenAIChatModel('gpt-test')\n"
        "except ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert 'pip install "zincir[openai]"' in done.stdout


def test_importing_the_agent_loop_leaves_the_sdk_unimported() -> None:
    """The SDK's import costs a restarted process about half a second: only a model loads it."""
    code = (
        "import sys\nimport zincir.agent\nprint('openai' in sys.modules)\n"
        "zincir.agent.OpenAIChatModel('gpt-test')\nprint('openai' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert done.stdout.split() == ["False", "True"]


# -- the agent loop on the model --------------------------------------------------------------


def order_agent(server: ChatServer, log: list[str]) -> Agent:
    @tool
    async def lookup_order(order_id: str) -> dict[str, Any]:
        """Find an order by id."""
        log.append(order_id)
        return {"order_id": order_id, "status": "shipped"}

    return Agent(model(server), name="support", instructions="Help.", tools=[lookup_order])


def order_script() -> list[Reply]:
    return [
        Reply(
            completion(
                None,
                [tool_call("call_1", "lookup_order", '{"order_id": "A-17"}')],
                finish_reason="tool_calls",
            )
        ),
        Reply(completion("A-17 has shipped.", usage_=usage(30, 6))),
    ]


async def test_agent_runs_a_tool_call_on_the_direct_path(server: ChatServer) -> None:
    log: list[str] = []
    server.script(*order_script())
    result = await order_agent(server, log).run("Where is A-17?")

    assert result.output == "A-17 has shipped."
    assert log == ["A-17"]
    assert result.usage.input_tokens == 40 and result.usage.output_tokens == 11
    first, second = server.bodies
    assert first["messages"] == [
        {"role": "system", "content": "Help."},
        {"role": "user", "content": "Where is A-17?"},
    ]
    [definition] = first["tools"]
    assert definition["function"]["name"] == "lookup_order"
    assert definition["function"]["parameters"]["required"] == ["order_id"]
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id":"A-17"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": json.dumps({"order_id": "A-17", "status": "shipped"}, separators=(",", ":")),
        },
    ]


async def test_agent_durable_run_replays_without_calling_the_server(
    server: ChatServer, durable: Durable
) -> None:
    log: list[str] = []
    server.script(*order_script())
    agent = order_agent(server, log)
    first = await agent.run("Where is A-17?", durable=durable.binding(agent, "openai-1"))
    again = await agent.run("Where is A-17?", durable=durable.binding(agent, "openai-1"))

    assert first.output == again.output == "A-17 has shipped."
    assert log == ["A-17"] and len(server.received) == 2
