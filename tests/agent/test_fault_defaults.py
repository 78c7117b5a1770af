"""The ordinary faults of a long run, on default settings: a durable agent on
``OpenAIChatModel`` (the real ``openai`` SDK, ``max_retries=0``) against a scripted
chat-completions server on loopback, through a LocalRuntime and ``serve``.

Malformed tool arguments and a raising tool reach the model and the run goes on; a tool's
``RetryTool`` waits a durable delay; a provider outage of 8 seconds and a 429 with
``Retry-After`` are waited out; a run that still fails says what happened in the
conversation's terms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import openai
import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.openai_server import (
    API_KEY,
    ChatServer,
    Reply,
    chat_server,
    completion,
    error,
    tool_call,
)
from tests.helpers import select
from zincir.agent import (
    Agent,
    DurableOperationFailed,
    FunctionModel,
    Handlers,
    OpenAIChatModel,
    RetryTool,
    serve,
    tool,
)
from zincir.agent._retry import DEFAULT_MODEL_RETRY, retry_document
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart


class Weather:
    """The tool's behaviour, one entry per call: None answers, an exception is raised."""

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, float]] = []

    def tool(self, **options: Any) -> zincir.agent.Tool:
        @tool(**options)
        async def get_weather(city: str) -> str:
            """The weather in a city."""
            self.calls.append((city, time.monotonic()))
            outcome = self.outcomes.pop(0) if self.outcomes else None
            if outcome is not None:
                raise outcome
            return f"sunny in {city}"

        return get_weather


def weather_agent(server: ChatServer, weather: Weather, **options: Any) -> Agent:
    model = OpenAIChatModel("gpt-test", server.client())
    tool_options = options.pop("tool_options", {})
    return Agent(
        model,
        name="weather",
        instructions="Report the weather.",
        tools=[weather.tool(**tool_options)],
        **options,
    )


def calls_then_answer(arguments: str = '{"city": "Oslo"}', call_id: str = "call_1") -> list[Reply]:
    return [
        Reply(completion(None, [tool_call(call_id, "get_weather", arguments)])),
        Reply(completion("It is sunny in Oslo.")),
    ]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [message for message in body["messages"] if message["role"] == "tool"]


def operations(durable: Durable, run_id: str) -> list[tuple[str, int, str]]:
    return [
        (step, sequence, outcome)
        for step, sequence, outcome in select(
            durable.target,
            "SELECT step_id, sequence, outcome FROM operations WHERE run_id = ? ORDER BY 2, 1",
            (run_id,),
        )
    ]


# -- malformed arguments --------------------------------------------------------------------


async def test_malformed_arguments_reach_the_model_and_the_run_completes(
    server: ChatServer, durable: Durable
) -> None:
    weather = Weather()
    server.script(
        Reply(completion(None, [tool_call("call_1", "get_weather", '{"city": "Oslo"')])),
        *calls_then_answer(call_id="call_2"),
    )
    agent = weather_agent(server, weather)
    result = await agent.run("Weather in Oslo?", durable=durable.binding(agent, "malformed"))

    assert result.output == "It is sunny in Oslo."
    assert [city for city, _ in weather.calls] == ["Oslo"]  # only the well-formed call ran
    second = server.bodies[1]["messages"]
    # The assistant's call goes back with its text as the model sent it, then the error.
    assert second[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"'
    assert second[3]["role"] == "tool" and second[3]["tool_call_id"] == "call_1"
    assert "the arguments of your call to 'get_weather' were not valid JSON" in second[3]["content"]
    assert "send a JSON object matching the tool's schema" in second[3]["content"]

    again = await agent.run("Weather in Oslo?", durable=durable.binding(agent, "malformed"))
    assert again.output == result.output and len(server.received) == 3


async def test_malformed_arguments_while_streaming(server: ChatServer, durable: Durable) -> None:
    from tests.agent.openai_server import call_delta, chunk

    weather = Weather()
    server.script(
        Reply(
            chunks=[
                chunk(call_delta(0, '{"city": ', call_id="call_1", name="get_weather")),
                chunk(finish_reason="tool_calls"),
            ]
        ),
        Reply(chunks=[chunk({"content": "Please say which city."}), chunk(finish_reason="stop")]),
    )
    agent = weather_agent(server, weather)
    handlers = Handlers(model_stream="ref-stream", tool_call="ref-tools")
    stream = agent.run_stream("Weather?", durable=durable.binding(agent, "s", handlers=handlers))
    async for _ in stream:
        pass
    assert stream.result.output == "Please say which city."
    [message] = tool_messages(server.bodies[1])
    assert "were not valid JSON" in message["content"] and weather.calls == []


async def test_the_model_that_keeps_sending_malformed_arguments_is_bounded(
    server: ChatServer, durable: Durable
) -> None:
    server.script(
        *[Reply(completion(None, [tool_call(f"call_{n}", "get_weather", "{")])) for n in range(3)]
    )
    agent = weather_agent(server, Weather(), tool_retries=1)
    with pytest.raises(zincir.agent.ToolRetriesExhausted, match="arguments that are not JSON"):
        await agent.run("Weather?", durable=durable.binding(agent, "bounded"))
    assert len(server.received) == 2


# -- a raising tool -------------------------------------------------------------------------


async def test_a_raising_tools_error_is_in_the_next_request_and_the_run_completes(
    server: ChatServer, durable: Durable
) -> None:
    weather = Weather(ValueError("weather service down"))
    server.script(*calls_then_answer())
    agent = weather_agent(server, weather)
    result = await agent.run("Weather in Oslo?", durable=durable.binding(agent, "raising"))

    assert result.output == "It is sunny in Oslo."
    [message] = tool_messages(server.bodies[1])
    assert message == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "ValueError: weather service down",
    }
    [returned] = [m for m in result.messages if m.role == "tool"]
    assert returned.parts[0].is_error  # type: ignore[union-attr]
    # The stored record is the error output: running the run again calls nothing.
    assert ("tool.call", 0, "success") in operations(durable, "raising")
    again = await agent.run("Weather in Oslo?", durable=durable.binding(agent, "raising"))
    assert again.output == result.output
    assert len(weather.calls) == 1 and len(server.received) == 2


async def test_tool_errors_fail_fails_the_run_with_a_clear_error(
    server: ChatServer, durable: Durable
) -> None:
    weather = Weather(ValueError("weather service down"))
    server.script(*calls_then_answer())
    agent = weather_agent(server, weather, tool_errors="fail")
    with pytest.raises(DurableOperationFailed) as caught:
        await agent.run("Weather in Oslo?", durable=durable.binding(agent, "failing"))
    error = caught.value
    assert error.error == "ToolFailed" and error.run_id == "failing"
    text = str(error)
    assert "[run failing]" in text
    assert "tool 'get_weather' raised ValueError: weather service down" in text
    assert "tool call 'get_weather' (call id 'call_1') of model request 1" in text
    assert "tool_errors='report'" in text and "new run" in text
    assert "tool.call" not in text and "#" not in text  # no step ids or sequences
    row = await durable.store.get_run("failing")
    assert row is not None and row["status"] == "failed"
    assert len(server.received) == 1


async def test_a_tools_own_setting_wins_over_the_agents() -> None:
    def script(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(parts=[TextPart(text=str(request.messages[-1].parts[0]))])
        call = ToolCallPart(tool_call_id="c1", tool_name="get_weather", arguments={"city": "A"})
        return ModelResponse(parts=[call])

    reporting = Weather(KeyError("A"))
    agent = Agent(
        FunctionModel(script),
        tools=[reporting.tool(tool_errors="report")],
        tool_errors="fail",
    )
    assert "KeyError: 'A'" in (await agent.run("go")).output

    failing = Weather(KeyError("A"))
    agent = Agent(FunctionModel(script), tools=[failing.tool(tool_errors="fail")])
    with pytest.raises(zincir.OperationFailed, match="ToolFailed") as caught:
        await agent.run("go")
    assert isinstance(caught.value.__cause__, KeyError)


async def test_signals_and_operation_failures_are_not_reported() -> None:
    def script(request: ModelRequest) -> ModelResponse:
        call = ToolCallPart(tool_call_id="c1", tool_name="get_weather", arguments={"city": "A"})
        return ModelResponse(parts=[call])

    agent = Agent(FunctionModel(script), tools=[Weather(zincir.ApprovalRequired("ask")).tool()])
    assert (await agent.run("go")).paused is not None
    broken = Weather(zincir.OperationFailed("Broken", False, "gone"))
    agent = Agent(FunctionModel(script), tools=[broken.tool()])
    with pytest.raises(zincir.OperationFailed, match="Broken"):
        await agent.run("go")


def test_tool_errors_is_checked() -> None:
    with pytest.raises(zincir.InvalidInput, match="tool_errors"):
        Agent(FunctionModel(lambda request: None), tool_errors="ignore")  # type: ignore[arg-type]
    with pytest.raises(zincir.InvalidInput, match="tool_errors"):
        Weather().tool(tool_errors="raise")


# -- RetryTool --------------------------------------------------------------------------------


async def test_a_tool_asking_to_be_retried_waits_a_durable_delay_then_succeeds(
    server: ChatServer, durable: Durable
) -> None:
    weather = Weather(RetryTool("the upstream asked us to slow down", delay=1))
    server.script(*calls_then_answer())
    agent = weather_agent(server, weather)
    result = await agent.run("Weather in Oslo?", durable=durable.binding(agent, "retry-tool"))

    assert result.output == "It is sunny in Oslo."
    (_, first), (_, second) = weather.calls
    assert second - first >= 1.0
    [message] = tool_messages(server.bodies[1])
    assert message["content"] == "sunny in Oslo"
    stride = 10**12
    assert operations(durable, "retry-tool") == [
        ("model.request", 0, "success"),
        ("tool.call", 0, "failure"),
        ("model.request", 1, "success"),
        ("retry.delay", 1000 * stride, "success"),
        ("tool.call", 1000 * stride, "success"),
    ]
    [(input_json,)] = select(
        durable.target,
        "SELECT input_json FROM operations WHERE run_id = ? AND step_id = 'retry.delay'",
        ("retry-tool",),
    )
    delay = json.loads(input_json)
    assert delay["error"] == "RetryTool" and delay["delay_seconds"] >= 1.0
    assert delay["provider_metadata"]["tool_call_id"] == "call_1"


async def test_a_tool_that_keeps_asking_is_reported_after_its_last_attempt(
    server: ChatServer, durable: Durable
) -> None:
    weather = Weather(*[RetryTool("still busy")] * 3)
    server.script(*calls_then_answer())
    policy = zincir.RetryPolicy(max_attempts=2, initial_interval=timedelta(milliseconds=20))
    agent = weather_agent(server, weather, tool_retry=policy)
    result = await agent.run("Weather?", durable=durable.binding(agent, "retry-spent"))
    assert result.output == "It is sunny in Oslo." and len(weather.calls) == 2
    [message] = tool_messages(server.bodies[1])
    assert message["content"] == "RetryTool: still busy"


# -- provider outages ---------------------------------------------------------------------------


async def test_an_eight_second_outage_is_waited_out_with_default_settings(
    server: ChatServer, durable: Durable
) -> None:
    server.outage(8)
    server.script(Reply(completion("Back again.")))
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="outage")
    assert agent.retry == DEFAULT_MODEL_RETRY
    started = time.monotonic()
    result = await agent.run("Hello?", durable=durable.binding(agent, "outage"))

    assert result.output == "Back again."
    assert time.monotonic() - started >= 8
    *failed, answered = server.received
    assert failed and all(received.status == 503 for received in failed)
    assert answered.status == 200
    delays = select(
        durable.target,
        "SELECT COUNT(*) FROM operations WHERE run_id = ? AND step_id = 'retry.delay'",
        ("outage",),
    )
    assert delays[0][0] >= 1


async def test_a_429_with_retry_after_waits_at_least_that_long(
    server: ChatServer, durable: Durable
) -> None:
    server.script(
        error(429, "Rate limit reached", {"retry-after": "2"}), Reply(completion("Done."))
    )
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="limited")
    result = await agent.run("Hello?", durable=durable.binding(agent, "limited"))

    assert result.output == "Done."
    # The runtime's own immediate attempts do not retry it: the durable delay waits 2 s.
    first, last = server.received
    assert first.status == 429 and last.status == 200
    assert last.at - first.at >= 2.0


async def test_an_outage_past_the_retry_policy_fails_the_run_saying_what_to_do(
    server: ChatServer, durable: Durable
) -> None:
    server.outage(60)
    policy = zincir.RetryPolicy(max_attempts=2, initial_interval=timedelta(milliseconds=20))
    agent = Agent(OpenAIChatModel("gpt-test", server.client()), name="down", retry=policy)
    with pytest.raises(DurableOperationFailed) as caught:
        await agent.run("Hello?", durable=durable.binding(agent, "down"))
    text = str(caught.value)
    assert caught.value.error == "ProviderUnavailable" and "[run down]" in text
    assert "model request 1 failed" in text and "HTTP 503" in text
    assert "Agent(retry=RetryPolicy(...))" in text and "start a new run" in text
    assert "model.request" not in text


# -- the policy and the handler ------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["a", "run-2", "weather-0192", "x" * 40])
def test_the_default_policy_waits_at_least_ten_minutes_whatever_the_draws(run_id: str) -> None:
    failure = zincir.OperationFailed("ProviderUnavailable", True, "HTTP 503")
    policy = DEFAULT_MODEL_RETRY
    waited, retry = 0.0, 0
    first = None
    while not policy.exhausted(retry + 1, timedelta(seconds=waited)):
        retry += 1
        delay = retry_document(
            policy,
            run_id=run_id,
            retry=retry,
            failed_request=0,
            error=failure,
            cumulative_before=waited,
        )
        first = first if first is not None else delay.delay_seconds
        assert delay.delay_seconds <= 30
        waited = delay.cumulative_delay_seconds
    assert waited >= 600 and retry < 999
    assert first is not None and first <= 1


def test_max_elapsed_stops_the_retries() -> None:
    policy = zincir.RetryPolicy(max_attempts=100, max_elapsed=timedelta(seconds=5))
    assert not policy.exhausted(1, timedelta(seconds=4.9))
    assert policy.exhausted(1, timedelta(seconds=5))
    assert policy.exhausted(100, timedelta(0))
    assert zincir.RetryPolicy().exhausted(2, timedelta(days=1)) is False
    with pytest.raises(zincir.InvalidInput, match="max_elapsed"):
        zincir.RetryPolicy(max_elapsed=timedelta(seconds=-1))


def test_serve_registers_the_default_timer_once_for_many_agents() -> None:
    registry = zincir.HandlerRegistry()
    for name in ("one", "two"):
        agent = Agent(FunctionModel(lambda request: None), name=name)
        serve(registry, agent, Handlers(model_request=f"{name}-model"))
    assert (zincir.OperationKind.RETRY_DELAY, "zincir.retry-delay") in registry
    assert Handlers().retry_delay == "zincir.retry-delay"


# -- errors in the user's terms -------------------------------------------------------------


async def test_input_drift_names_the_model_request_and_what_changed(durable: Durable) -> None:
    @tool(requires_approval=True)
    async def refund(order: str) -> str:
        return "refunded"

    def script(request: ModelRequest) -> ModelResponse:
        call = ToolCallPart(tool_call_id="c1", tool_name="refund", arguments={"order": "A"})
        return ModelResponse(parts=[call])

    handlers = Handlers(model_request="ref-model", tool_call="ref-tools", approval_resume="ok")
    agent = Agent(FunctionModel(script), instructions="Refund orders.", tools=[refund])
    paused = await agent.run("Refund A.", durable=durable.binding(agent, handlers=handlers))
    assert paused.paused is not None

    changed = Agent(FunctionModel(script), instructions="Refund nothing.", tools=[refund])
    with pytest.raises(zincir.InputDrift) as caught:
        await changed.run("Refund A.", durable=durable.binding(changed, handlers=handlers))
    text = str(caught.value)
    assert caught.value.run_id == "run-1" and "[run run-1]" in text
    assert "model request 1 was recorded with other input" in text
    assert "the agent's instructions differ" in text and "start a new run id" in text
    assert "sequence" not in text and "model.request" not in text


# -- the stored documents -------------------------------------------------------------------


def test_a_well_formed_calls_document_is_encoded_as_before() -> None:
    call = ToolCallPart(tool_call_id="c1", tool_name="get_weather", arguments={"city": "Oslo"})
    text = (
        '{"type":"tool_call","tool_call_id":"c1","tool_name":"get_weather",'
        '"arguments":{"city":"Oslo"}}'
    )
    assert call.to_json() == text and ToolCallPart.from_json(text) == call
    response = ModelResponse(parts=[call])
    assert ModelResponse.from_json(response.to_json()) == response
    assert "malformed_arguments" not in response.to_json()


def test_a_malformed_call_round_trips_and_replays_as_the_same_stream() -> None:
    from zincir.agent._stream import assemble_stream
    from zincir.payloads import stream_parts

    call = ToolCallPart(
        tool_call_id="c1", tool_name="get_weather", malformed_arguments='{"city": "Oslo"'
    )
    assert call.arguments == {} and call.arguments_text == '{"city": "Oslo"'
    assert ToolCallPart.from_json(call.to_json()) == call
    with pytest.raises(zincir.InvalidDocument, match="malformed_arguments"):
        ToolCallPart(tool_call_id="c1", tool_name="t", arguments={"a": 1}, malformed_arguments="{")

    async def replay() -> list[Any]:
        async def parts() -> AsyncIterator[Any]:
            for part in stream_parts(ModelResponse(parts=[call])):
                yield part

        assembled, _ = await assemble_stream(parts())
        return assembled

    assert asyncio.run(replay()) == [call]


# -- the direct path ------------------------------------------------------------------------


async def test_a_function_model_can_send_malformed_arguments() -> None:
    weather = Weather()

    def script(request: ModelRequest) -> ModelResponse:
        turn = sum(message.role == "assistant" for message in request.messages)
        if turn == 0:
            call = ToolCallPart(
                tool_call_id="c1", tool_name="get_weather", malformed_arguments='["Oslo"]'
            )
            return ModelResponse(parts=[call])
        if turn == 1:
            call = ToolCallPart(tool_call_id="c2", tool_name="get_weather", arguments={"city": "O"})
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(text="done")])

    result = await Agent(FunctionModel(script), tools=[weather.tool()]).run("go")
    assert result.output == "done" and [city for city, _ in weather.calls] == ["O"]
    rejected = next(m for m in result.messages if m.role == "tool").parts[0]
    assert rejected.is_error  # type: ignore[union-attr]
    assert "were a JSON list, not an object" in rejected.content  # type: ignore[union-attr]


async def test_retry_tool_on_the_direct_path_sleeps_in_process() -> None:
    weather = Weather(RetryTool("busy", delay=0.2))

    def script(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(parts=[TextPart(text="done")])
        call = ToolCallPart(tool_call_id="c1", tool_name="get_weather", arguments={"city": "O"})
        return ModelResponse(parts=[call])

    result = await Agent(FunctionModel(script), tools=[weather.tool()]).run("go")
    (_, first), (_, second) = weather.calls
    assert result.output == "done" and second - first >= 0.2


async def test_refused_connections_are_waited_out_with_default_settings(
    durable: Durable,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on until the server starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0
    )
    agent = Agent(OpenAIChatModel("gpt-test", client), name="refused")
    with contextlib.ExitStack() as stack:

        async def start_later() -> ChatServer:
            await asyncio.sleep(4)
            started = await asyncio.to_thread(stack.enter_context, chat_server(port))
            started.script(Reply(completion("Reachable again.")))
            return started

        starting = asyncio.ensure_future(start_later())
        began = time.monotonic()
        result = await agent.run("Hello?", durable=durable.binding(agent, "refused"))
        started = await starting
        assert result.output == "Reachable again." and time.monotonic() - began >= 4
        assert [received.status for received in started.received] == [200]
        await client.close()
    [(count,)] = select(
        durable.target,
        "SELECT COUNT(*) FROM operations WHERE run_id = ? AND step_id = 'retry.delay'",
        ("refused",),
    )
    assert count >= 1
