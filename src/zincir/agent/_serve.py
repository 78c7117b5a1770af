"""``serve``: the worker side, one registered handler per configured handler id.

Each handler reads the neutral payload document of its kind and does the work the agent
process never does on the durable path: ask the model, run a tool, wait, decide.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import (
    ApprovalRequired,
    CallDeferred,
    InvalidDocument,
    InvalidInput,
    OperationFailed,
    Suspend,
)
from ..contract import Invocation, OperationKind
from ..contract.payloads import (
    ApprovalDecision,
    ApprovalRequest,
    EventDelivery,
    McpRequest,
    ModelRequest,
    ModelResponse,
    RetryDelay,
    RunContext,
    ToolOutput,
    ToolRequest,
)
from ..durable import DocumentHandler, HandlerRegistry
from ..streams._writer import live_writer
from ._approval import approved
from ._binding import Handlers
from ._current import ToolCallInfo, serving_call
from ._identity import ATTEMPT_STRIDE
from ._models import coerce_response
from ._rate_limit import limited_request, model_rate_limit
from ._stream import assemble_stream
from ._tools import Tool, ToolArgumentsRejected, ToolOrigin, call_tool

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Approver", "serve"]

Approver = Callable[[ApprovalRequest], Awaitable[Any] | Any]
_Handler = Callable[[Invocation], Awaitable[Any]]


def serve(
    registry: HandlerRegistry,
    agent: Agent,
    handlers: Handlers,
    approver: Approver | None = None,
) -> None:
    """Register, for each id configured in ``handlers``, the handler that serves ``agent``.

    The ``retry_delay`` timer serves every agent alike: when its id is already registered
    (another agent's ``serve`` on the same registry), it is left as it is.
    """
    if not isinstance(registry, HandlerRegistry):
        raise InvalidInput("registry must be a zincir.HandlerRegistry")
    if not isinstance(handlers, Handlers):
        raise InvalidInput("handlers must be a zincir.agent.Handlers")
    makers: dict[OperationKind, Callable[[], _Handler]] = {
        OperationKind.MODEL_REQUEST: lambda: _model_request(agent),
        OperationKind.MODEL_STREAM: lambda: _model_stream(agent),
        OperationKind.TOOL_CALL: lambda: _tool_call(agent),
        OperationKind.MCP_REQUEST: lambda: _mcp_request(agent),
        OperationKind.RETRY_DELAY: _retry_delay,
        OperationKind.APPROVAL_RESUME: lambda: _approval_resume(approver),
        OperationKind.EVENT_DELIVERY: lambda: _event_delivery(agent),
    }
    for kind, handler_id in handlers.configured():
        if kind is OperationKind.RETRY_DELAY and (kind, handler_id) in registry:
            continue
        registry.register(kind, handler_id, DocumentHandler(makers[kind]()))


def _model_request(agent: Agent) -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        document = ModelRequest.from_json(invocation.input_json)
        limit = model_rate_limit(agent.model)
        try:
            if limit is not None:
                return await limited_request(
                    limit,
                    invocation.run_id,
                    invocation.input_json,
                    document,
                    lambda: _answer(agent, document),
                )
            return await _answer(agent, document)
        except InvalidDocument as error:
            raise OperationFailed("InvalidModelResponse", False, error.detail) from None

    return handle


async def _answer(agent: Agent, document: ModelRequest) -> ModelResponse:
    """The model's answer to ``document``, checked."""
    return coerce_response(await agent.model.request(document), model=agent.model.name)


def _model_stream(agent: Agent) -> _Handler:
    """Executed in the process of the run's loop (a LocalRuntime), the provider's parts are
    also appended live to the run's durable stream; executed elsewhere, none are (the
    loop's ``message`` item carries the answer)."""

    async def handle(invocation: Invocation) -> Any:
        document = ModelRequest.from_json(invocation.input_json)

        async def streamed() -> ModelResponse:
            stream = agent.model.stream(document)
            writer = live_writer(invocation.run_id)
            if writer is not None:
                stream = writer.tee(invocation.sequence % ATTEMPT_STRIDE, stream)
            parts, usage = await assemble_stream(stream)
            return ModelResponse(parts=parts, usage=usage, model_name=agent.model.name)

        limit = model_rate_limit(agent.model)
        try:
            if limit is not None:
                return await limited_request(
                    limit, invocation.run_id, invocation.input_json, document, streamed
                )
            return await streamed()
        except InvalidDocument as error:
            raise OperationFailed("InvalidModelResponse", False, error.detail) from None

    return handle


async def _run(
    agent: Agent,
    tool: Tool | None,
    name: str,
    origin: ToolOrigin,
    arguments: Mapping[str, Any],
    call: ToolCallInfo,
    approval: ApprovalDecision | None = None,
) -> tuple[Any, bool]:
    """The tool's result and whether it reports an error: an ordinary exception is the
    call's error result (or a ``ToolFailed`` failure with ``tool_errors="fail"``); a
    ``RetryTool`` (or a retryable failure) is a failure the agent retries after a
    durable delay."""
    if tool is None or tool.origin is not origin:
        raise OperationFailed(
            "UnknownTool", False, f"this worker serves no {origin.value} tool {name!r}"
        )
    try:
        with approved(approval), serving_call(call):
            return await call_tool(tool, arguments, tool.tool_errors or agent.tool_errors)
    except ToolArgumentsRejected as error:
        raise OperationFailed("InvalidToolArguments", False, error.message) from None
    except ApprovalRequired as signal:
        raise Suspend("approval", {"tool_name": name, "reason": signal.reason}) from None
    except CallDeferred as signal:
        raise Suspend("external_tool", {"tool_name": name, "reason": signal.reason}) from None


def _tool_call(agent: Agent) -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        document = ToolRequest.from_json(invocation.input_json)
        call = document.call
        tool = await agent.find_tool(call.tool_name, document.context)
        content, is_error = await _run(
            agent,
            tool,
            call.tool_name,
            ToolOrigin.APPLICATION,
            document.arguments,
            ToolCallInfo(
                invocation.run_id, call.tool_call_id, call.tool_name, invocation.stable_key()
            ),
            document.approval,
        )
        return ToolOutput(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            content=content,
            is_error=is_error,
        )

    return handle


def _mcp_request(agent: Agent) -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        document = McpRequest.from_json(invocation.input_json)
        name, arguments = document.params.get("name"), document.params.get("arguments", {})
        if document.method != "tools/call" or not isinstance(name, str):
            raise OperationFailed(
                "UnsupportedMcpMethod",
                False,
                f"this worker serves tools/call, not {document.method!r}",
            )
        if not isinstance(arguments, dict):
            raise OperationFailed("InvalidToolArguments", False, "arguments must be an object")
        context = RunContext(run_id=invocation.run_id, agent_name=agent.name)
        tool = await agent.find_tool(name, context)
        call_id = f"{invocation.step_id}#{invocation.sequence}"
        info = ToolCallInfo(invocation.run_id, call_id, name, invocation.stable_key())
        content, is_error = await _run(agent, tool, name, ToolOrigin.MCP, arguments, info)
        return ToolOutput(tool_call_id=call_id, tool_name=name, content=content, is_error=is_error)

    return handle


def _retry_delay() -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        document = RetryDelay.from_json(invocation.input_json)
        await asyncio.sleep(document.delay_seconds)
        return {"slept_seconds": document.delay_seconds}

    return handle


def _approval_resume(approver: Approver | None) -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        document = ApprovalRequest.from_json(invocation.input_json)
        if approver is None:
            return document.proposed
        decision = approver(document)
        if inspect.isawaitable(decision):
            decision = await decision
        if isinstance(decision, Mapping):
            decision = ApprovalDecision.from_dict(decision)
        if not isinstance(decision, ApprovalDecision):
            raise OperationFailed(
                "InvalidApprovalDecision", False, "the approver must return an ApprovalDecision"
            )
        return decision

    return handle


def _event_delivery(agent: Agent) -> _Handler:
    async def handle(invocation: Invocation) -> Any:
        await agent.deliver(EventDelivery.from_json(invocation.input_json))
        return {"delivered": True}

    return handle
