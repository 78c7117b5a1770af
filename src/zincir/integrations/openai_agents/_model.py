"""DurableModel: a ``Model`` whose every ``get_response`` / ``stream_response`` is a zincir
operation (``openai_agents.model.request`` / ``openai_agents.model.stream``, sequence = the
run's model call number), so a replay returns the recorded response or stream events and
calls nothing. Whatever model the agent resolves to (its own, a provider's) is wrapped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from openai.types.responses import ResponseCompletedEvent, ResponseFunctionToolCall
from openai.types.responses.response_prompt_param import ResponsePromptParam

from ..._errors import DuplicateToolCall
from ...contract import OperationKind
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
        document = self._document(system_instructions, input, tools, output_schema, handoffs)
        document["previous_response_id"] = previous_response_id
        document["conversation_id"] = conversation_id

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
            return encode_response(response)

        await _check_budget(scope)
        value, _ = await scope.execute(
            MODEL_REQUEST, number, OperationKind.MODEL_REQUEST, document, body
        )
        scope.model_done(number)
        response = decode_response(value)
        await self._answered(number, response, handoffs)
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
        document = self._document(system_instructions, input, tools, output_schema, handoffs)
        document["previous_response_id"] = previous_response_id
        document["conversation_id"] = conversation_id
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

        async def unit() -> tuple[Any, bool]:
            try:
                return await scope.execute(
                    MODEL_STREAM, number, OperationKind.MODEL_STREAM, document, body
                )
            finally:
                live.put_nowait(_END)

        await _check_budget(scope)
        task = asyncio.ensure_future(unit())
        try:
            while (event := await live.get()) is not _END:
                yield event  # live: the events as the model sends them
            value, ran = await task
            scope.model_done(number)
            completed = None
            for data in value["events"]:
                event = decode_event(data)
                if isinstance(event, ResponseCompletedEvent):
                    completed = event
                if not ran:
                    yield event  # replayed: the recorded events, nothing called
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if completed is not None:
            response = ModelResponse(
                output=list(completed.response.output), usage=_usage(completed), response_id=None
            )
            await self._answered(number, response, handoffs)

    def _document(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
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
        }

    async def _answered(
        self, number: int, response: ModelResponse, handoffs: list[Handoff]
    ) -> None:
        """Plan the response's tool calls; log it once for the inspector and budgets."""
        scope = self.scope
        call_ids = [getattr(item, "call_id", None) for item in response.output]
        scope.plan_calls(number, [call_id for call_id in call_ids if isinstance(call_id, str)])
        if scope.ctx is None or number < scope.logged_responses:
            return
        transfers = {handoff.tool_name for handoff in handoffs}
        intents = [
            {"id": item.call_id, "name": item.name, "arguments": _arguments(item.arguments)}
            for item in response.output
            if isinstance(item, ResponseFunctionToolCall) and item.name not in transfers
        ]
        text = "".join(
            part.text
            for item in response.output
            if getattr(item, "type", None) == "message"
            for part in getattr(item, "content", [])
            if getattr(part, "type", None) == "output_text"
        )
        usage = {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        }
        with contextlib.suppress(DuplicateToolCall):
            await scope.ctx.record_response(text, intents, usage=usage, durable=False)
        scope.logged_responses = number + 1


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
