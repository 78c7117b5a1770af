"""DurableModel: a ``Model`` whose every ``get_response`` / ``stream_response`` is a zincir
operation (``openai_agents.model.request`` / ``openai_agents.model.stream``, sequence = the
run's model call number), so a replay returns the recorded response or stream events and
calls nothing. Whatever model the agent resolves to (its own, a provider's) is wrapped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

from ..._errors import DuplicateToolCall
from ...contract import OperationKind
from ...runs import response_entry
from ...store import LogEntry, ResponseEntry
from ._codec import decode_event, decode_response, digest, encode_event, encode_response
from ._run import RunScope

__all__ = ["MODEL_REQUEST", "MODEL_STREAM", "DurableModel"]

MODEL_REQUEST: Final = "openai_agents.model.request"
MODEL_STREAM: Final = "openai_agents.model.stream"
_END: Final = object()


class DurableModel(Model):
    """``inner`` with each call run once per run and replayed from its record after."""

    def __init__(self, inner: Model, scope: RunScope, agent: str) -> None:
        self.inner = inner
        self.scope = scope
        self.agent = agent

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        scope = self.scope
        number = scope.next_model()
        document = self._document(
            system_instructions,
            input,
            tools,
            output_schema,
            handoffs,
            previous_response_id,
            conversation_id,
        )

        made: list[ModelResponse] = []

        async def body() -> Any:
            response = await self.inner.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            made.append(response)
            return encode_response(response)

        def log(value: Any) -> LogEntry | None:
            return self._entry(number, made[0] if made else decode_response(value), handoffs)

        await _check_budget(scope)
        value, _, logged = await scope.execute(
            MODEL_REQUEST, number, OperationKind.MODEL_REQUEST, document, body, log
        )
        scope.model_done(number)
        response = made[0] if made else decode_response(value)
        await self._answered(number, response, handoffs, logged)
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        scope = self.scope
        number = scope.next_model()
        document = self._document(
            system_instructions,
            input,
            tools,
            output_schema,
            handoffs,
            previous_response_id,
            conversation_id,
        )
        live: asyncio.Queue[Any] = asyncio.Queue()

        async def body() -> Any:
            events = []
            stream = self.inner.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            async for event in stream:
                events.append(encode_event(event))
                live.put_nowait(event)
            return {"events": events}

        def log(value: Any) -> LogEntry | None:
            response = _completed(decode_event(data) for data in value["events"])
            return None if response is None else self._entry(number, response, handoffs)

        async def unit() -> tuple[Any, bool, bool]:
            try:
                return await scope.execute(
                    MODEL_STREAM, number, OperationKind.MODEL_STREAM, document, body, log
                )
            finally:
                live.put_nowait(_END)

        await _check_budget(scope)
        task = asyncio.ensure_future(unit())
        try:
            while (event := await live.get()) is not _END:
                yield event  # live: the events as the model sends them
            value, ran, logged = await task
            scope.model_done(number)
            events = [decode_event(data) for data in value["events"]]
            if not ran:
                for event in events:
                    yield event  # replayed: the recorded events, nothing called
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        response = _completed(events)
        if response is not None:
            await self._answered(number, response, handoffs, logged)

    def _document(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        previous_response_id: str | None,
        conversation_id: str | None,
    ) -> dict[str, Any]:
        """What must be equal for a recorded call to stand for this one."""
        return {
            "model": str(getattr(self.inner, "model", "") or type(self.inner).__name__),
            "agent": self.agent,
            "instructions_sha256": digest(system_instructions),
            "input_sha256": digest(input),
            "items": 1 if isinstance(input, str) else len(input),
            "tools": sorted(getattr(tool, "name", type(tool).__name__) for tool in tools),
            "handoffs": sorted(handoff.tool_name for handoff in handoffs),
            "output": None if output_schema is None else output_schema.name(),
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
        }

    async def _answered(
        self, number: int, response: ModelResponse, handoffs: list[Handoff], logged: bool
    ) -> None:
        """Plan the response's tool calls; log it once for the inspector and budgets, when
        its record's transaction did not."""
        scope = self.scope
        call_ids = [getattr(item, "call_id", None) for item in response.output]
        scope.plan_calls(number, [call_id for call_id in call_ids if isinstance(call_id, str)])
        entry = None if logged else self._entry(number, response, handoffs)
        if entry is not None and scope.ctx is not None:
            with contextlib.suppress(DuplicateToolCall):
                ctx = scope.ctx
                ctx.check_lease()
                await ctx.store.record_response(
                    ctx.lease, entry.response_json, entry.intents, durable=False
                )
                logged = True
        if logged:
            scope.logged_responses = max(scope.logged_responses, number + 1)
            scope.intents.update(call_id for call_id, _, _ in entry_calls(response, handoffs))

    def _entry(
        self, number: int, response: ModelResponse, handoffs: list[Handoff]
    ) -> ResponseEntry | None:
        """The ``llm_call`` entry of model call ``number`` (None: the log holds it)."""
        scope = self.scope
        if scope.ctx is None or number < scope.logged_responses:
            return None
        intents = [
            {"id": call_id, "name": name, "arguments": _arguments(arguments)}
            for call_id, name, arguments in entry_calls(response, handoffs)
        ]
        text = "".join(
            part.text
            for item in response.output
            if isinstance(item, ResponseOutputMessage)
            for part in item.content
            if isinstance(part, ResponseOutputText)
        )
        usage = {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        }
        return response_entry(scope.run_id, text, intents, usage=usage)


def entry_calls(response: ModelResponse, handoffs: list[Handoff]) -> list[tuple[str, str, str]]:
    """The function calls of ``response`` the log shows as tool calls (not the handoffs)."""
    transfers = {handoff.tool_name for handoff in handoffs}
    return [
        (item.call_id, item.name, item.arguments)
        for item in response.output
        if isinstance(item, ResponseFunctionToolCall) and item.name not in transfers
    ]


def _completed(events: Iterable[Any]) -> ModelResponse | None:
    """The response a stream's ``response.completed`` event holds, if it has one."""
    for event in events:
        if isinstance(event, ResponseCompletedEvent):
            output = list(event.response.output)
            return ModelResponse(output=output, usage=_usage(event), response_id=None)
    return None


async def _check_budget(scope: RunScope) -> None:
    if scope.ctx is not None:
        await scope.ctx.check_budget("model")


def _usage(event: ResponseCompletedEvent) -> Any:
    from agents.usage import Usage

    usage = event.response.usage
    if usage is None:
        return Usage()
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
    )


def _arguments(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"raw": text}
    return value if isinstance(value, dict) else {"value": value}
