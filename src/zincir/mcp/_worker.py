"""The worker side: ``serve_mcp`` runs each ``mcp_request`` on a real MCP session.

The worker opens the session itself (``connect`` holds the transport and its credentials),
sends the one high-level operation the document names through the SDK's typed client, and
returns an ``McpReply``. Every way a request can go wrong becomes a failure with a stable
name, never a hang:

- retryable: ``McpTimeout`` (no answer within the timeout: the session is closed),
  ``McpConnectionLost`` (the server died, closed the connection or could not be reached);
- not retryable: ``McpServerError`` (the server answered with an error),
  ``McpInvalidResult`` (a result the SDK rejects), ``McpInputRoundsExceeded``,
  ``McpConnectFailed`` (no such server program), ``UnsupportedMcpMethod``,
  ``InvalidMcpParams``, ``McpInputNotServed`` (the request needs an input callback this
  worker has not registered), ``McpClientError`` (anything else the SDK raised).

Input a server asks for during a call (elicitation, sampling, roots) is answered by the
callbacks ``serve_mcp`` registers, inside the one operation; MCP tasks travel as the
``io.modelcontextprotocol/tasks`` extension (a ``tools/call`` whose ``_meta`` carries
``TASK_META`` is answered by a ``CreateTaskResult``; ``tasks/*`` are extension methods).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

import anyio
import httpx2
import mcp_types
from mcp import Client, InputRequiredRoundsExceededError, MCPError
from mcp.client import IncomingMessage
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ElicitationFnT, ListRootsFnT, SamplingFnT
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import BaseModel, ValidationError

from .._errors import InvalidInput, OperationFailed
from .._validate import check_id, check_positive_duration
from ..contract import Invocation, OperationKind
from ..contract.payloads import McpRequest
from ..durable import DocumentHandler, HandlerRegistry
from ._connect import Connect, open_client
from ._identity import MAX_EVENTS
from ._reply import McpReply, dump, short_reason

__all__ = [
    "DEFAULT_TIMEOUT",
    "INPUT_CAPABILITIES",
    "LISTEN_META",
    "METHODS",
    "TASKS_EXTENSION",
    "TASK_META",
    "InputCallbacks",
    "Notified",
    "TaskCreated",
    "check_params",
    "listen_bound",
    "perform",
    "serve_mcp",
]

DEFAULT_TIMEOUT: Final = timedelta(seconds=30)
LISTEN_META: Final = "zincir/listen"
"""The routing-metadata key of a durable subscription (``{"max_events": n}``); the worker
takes it out of ``_meta`` before the request reaches the server."""

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The extension MCP tasks travel as on the 2026-07-28 wire (the core spec dropped them)."""
TASK_META: Final = "io.modelcontextprotocol/task"
"""The ``_meta`` key of a task-augmented ``tools/call``: ``{"ttl": ms}`` (the SDK's
``TaskMetadata``); the server answers with a ``TaskCreated`` instead of the tool's result."""
INPUT_CAPABILITIES: Final = ("elicitation", "sampling", "roots")
"""The client capabilities a request may declare: answered by the worker's callbacks."""


class _Task(mcp_types.Task):
    """A task whose ``ttl`` may be left out: null (kept without limit) is dropped by
    servers that serialize without nulls."""

    ttl: int | None = None


class TaskStatus(mcp_types.GetTaskResult):
    """A ``tasks/get`` answer; its ``ttl`` may be left out (see :class:`_Task`)."""

    ttl: int | None = None


class TaskCancelled(mcp_types.CancelTaskResult):
    """A ``tasks/cancel`` answer; its ``ttl`` may be left out (see :class:`_Task`)."""

    ttl: int | None = None


class TaskList(mcp_types.ListTasksResult):
    """A ``tasks/list`` page; each task's ``ttl`` may be left out (see :class:`_Task`)."""

    tasks: list[_Task]  # type: ignore[assignment]


class TaskCreated(mcp_types.Result):
    """A server's answer to a task-augmented call: the task it created (``resultType: task``)."""

    result_type: Literal["task"] = "task"
    task: _Task


async def _unclaimed(result: TaskCreated, context: ClaimContext) -> mcp_types.CallToolResult:
    raise RuntimeError("a task is waited for by tasks/get polls, not resolved in the call")


class _Tasks(ClientExtension):
    """The tasks extension: advertised, and its ``TaskCreated`` result accepted."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=_unclaimed)]


@dataclass(frozen=True, slots=True)
class InputCallbacks:
    """The SDK callbacks a worker answers a server's input requests with (None: not served)."""

    elicitation: ElicitationFnT | None = None
    sampling: SamplingFnT | None = None
    roots: ListRootsFnT | None = None

    def served(self, request: McpRequest) -> InputCallbacks:
        """The callbacks ``request`` declared (so only those are advertised); a declared
        capability without a callback fails the request, never the server's question."""
        chosen: dict[str, Any] = {}
        for name in INPUT_CAPABILITIES:
            if name in request.capabilities:
                callback = getattr(self, name)
                if callback is None:
                    raise OperationFailed(
                        "McpInputNotServed",
                        False,
                        f"the request declares the {name} capability but this worker registered "
                        f"no {name} callback: pass serve_mcp(..., {name}=...) on the worker",
                    )
                chosen[name] = callback
        return InputCallbacks(**chosen)


NO_INPUT: Final = InputCallbacks()

Progress = ProgressFnT | None
"""Where a request's progress goes (None: the server is not asked for progress)."""
Notified = Callable[[dict[str, Any]], Awaitable[None]]
"""Receives each server notification (``{"method", "params"}``) as it arrives."""


async def _discover(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    session = client.session
    return session.discover_result or session.initialize_result


async def _list_tools(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.list_tools(cursor=params.cursor, meta=meta)


async def _list_resources(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.list_resources(cursor=params.cursor, meta=meta)


async def _list_templates(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.list_resource_templates(cursor=params.cursor, meta=meta)


async def _list_prompts(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.list_prompts(cursor=params.cursor, meta=meta)


async def _call_tool(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    if meta is not None and TASK_META in meta:
        return await client.session.call_tool(
            params.name,
            params.arguments,
            progress_callback=progress,
            meta=meta,
            allow_claimed=True,
        )
    return await client.call_tool(
        params.name,
        params.arguments,
        progress_callback=progress,
        meta=meta,
    )


async def _read_resource(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.read_resource(str(params.uri), meta=meta)


async def _get_prompt(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    return await client.get_prompt(params.name, params.arguments, meta=meta)


async def _complete(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    context = params.context.arguments if params.context is not None else None
    argument = {"name": params.argument.name, "value": params.argument.value}
    return await client.complete(params.ref, argument, context)


async def _get_task(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    request = mcp_types.GetTaskRequest(params=_with_meta(params, meta))
    return await client.session.send_request(request, TaskStatus)


async def _task_result(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    request = mcp_types.GetTaskPayloadRequest(params=_with_meta(params, meta))
    return await client.session.send_request(request, mcp_types.CallToolResult)


async def _cancel_task(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    request = mcp_types.CancelTaskRequest(params=_with_meta(params, meta))
    return await client.session.send_request(request, TaskCancelled)


async def _list_tasks(client: Client, params: Any, meta: Any, progress: Progress) -> Any:
    request = mcp_types.ListTasksRequest(params=_with_meta(params, meta))
    return await client.session.send_request(request, TaskList)


def _with_meta(params: Any, meta: Any) -> Any:
    return params if meta is None else params.model_copy(update={"meta": meta})


_Send = Callable[[Client, Any, Any, Progress], Awaitable[Any]]
"""Sends one operation: (client, its params as the SDK's model, ``_meta``, progress sink)."""

METHODS: Final[Mapping[str, tuple[type[BaseModel], _Send]]] = {
    "server/discover": (mcp_types.RequestParams, _discover),
    "tools/list": (mcp_types.PaginatedRequestParams, _list_tools),
    "resources/list": (mcp_types.PaginatedRequestParams, _list_resources),
    "resources/templates/list": (mcp_types.PaginatedRequestParams, _list_templates),
    "prompts/list": (mcp_types.PaginatedRequestParams, _list_prompts),
    "tools/call": (mcp_types.CallToolRequestParams, _call_tool),
    "resources/read": (mcp_types.ReadResourceRequestParams, _read_resource),
    "prompts/get": (mcp_types.GetPromptRequestParams, _get_prompt),
    "completion/complete": (mcp_types.CompleteRequestParams, _complete),
    "tasks/get": (mcp_types.GetTaskRequestParams, _get_task),
    "tasks/result": (mcp_types.GetTaskPayloadRequestParams, _task_result),
    "tasks/cancel": (mcp_types.CancelTaskRequestParams, _cancel_task),
    "tasks/list": (mcp_types.PaginatedRequestParams, _list_tasks),
}
"""The MCP operations a request may name: the SDK model of their params, and the typed
client call that sends them."""


def check_params(method: str, params: Mapping[str, Any]) -> Any:
    """``params`` as the SDK's model of ``method``'s params; OperationFailed otherwise."""
    entry = METHODS.get(method)
    if entry is None:
        raise OperationFailed(
            "UnsupportedMcpMethod",
            False,
            f"{method!r} is not an MCP operation zincir sends; use one of {', '.join(METHODS)}",
        )
    if "_meta" in params:
        raise OperationFailed("InvalidMcpParams", False, "pass _meta as the request's meta")
    try:
        return entry[0].model_validate(dict(params))
    except ValidationError as error:
        raise OperationFailed(
            "InvalidMcpParams", False, f"{method}: {short_reason(error)}"
        ) from None


def listen_bound(request: McpRequest) -> int | None:
    """How many notifications a durable subscription keeps; None for a plain request."""
    listen = request.meta.get(LISTEN_META)
    if listen is None:
        return None
    bound = listen.get("max_events") if isinstance(listen, dict) else None
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= MAX_EVENTS:
        raise OperationFailed(
            "InvalidMcpParams", False, f"{LISTEN_META} needs max_events in 1..{MAX_EVENTS}"
        )
    return bound


async def perform(
    request: McpRequest,
    connect: Connect,
    *,
    timeout: float,
    notified: Notified | None = None,
    progress_token: str = "direct",
    callbacks: InputCallbacks = NO_INPUT,
) -> McpReply:
    """Open a session, send the request, close the session; the reply, or OperationFailed.

    A durable subscription keeps its first ``max_events`` notifications in the reply;
    ``notified`` (the direct path's event sink) sees every notification as it arrives.
    Progress is asked for (a ``tools/call``'s) under ``progress_token`` when either wants it.
    The server's input requests are answered by the ``callbacks`` the request declared.
    """
    params = check_params(request.method, request.params)
    served = callbacks.served(request)
    send = METHODS[request.method][1]
    bound = listen_bound(request)
    kept: list[dict[str, Any]] = []
    dropped = 0

    async def keep(data: dict[str, Any]) -> None:
        nonlocal dropped
        if bound is not None:
            if len(kept) < bound:
                kept.append(data)
            else:
                dropped += 1
        if notified is not None:
            await notified(data)

    async def on_message(message: IncomingMessage) -> None:
        # Progress arrives through on_progress on every transport (an in-process server sends
        # it nowhere else); a transport fault fails the request itself.
        if isinstance(message, mcp_types.Notification) and not isinstance(
            message, mcp_types.ProgressNotification
        ):
            await keep(dump(message))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        note = mcp_types.ProgressNotificationParams(
            progress_token=progress_token, progress=progress, total=total, message=message
        )
        await keep(dump(mcp_types.ProgressNotification(params=note)))

    watch = bound is not None or notified is not None
    meta = {key: value for key, value in request.meta.items() if key != LISTEN_META} or None
    try:
        async with asyncio.timeout(timeout):
            client = open_client(
                request,
                connect,
                timeout=timeout,
                message_handler=on_message if watch else None,
                elicitation=served.elicitation,
                sampling=served.sampling,
                roots=served.roots,
                tasks=_Tasks() if meta is not None and TASK_META in meta else None,
            )
            async with client:
                result = await send(client, params, meta, on_progress if watch else None)
                version = client.protocol_version
    except OperationFailed:
        raise
    except Exception as error:  # noqa: BLE001 - every SDK or transport failure is classified
        raise failure(error, timeout) from None
    if result is None:
        raise OperationFailed("McpInvalidResult", False, "the server returned no result")
    return McpReply(
        protocol_version=version, result=dump(result), notifications=kept, dropped=dropped
    )


def failure(error: BaseException, timeout: float) -> OperationFailed:
    """The stable failure a request's exception stands for (exception groups unwrapped)."""
    leaf = _leaf(error)
    reason = short_reason(leaf) or type(leaf).__name__
    if isinstance(leaf, TimeoutError):
        return OperationFailed(
            "McpTimeout", True, f"no answer within {timeout:g} s; the session was closed"
        )
    if isinstance(leaf, MCPError):
        if leaf.code == REQUEST_TIMEOUT:
            return OperationFailed("McpTimeout", True, reason)
        if leaf.code == CONNECTION_CLOSED:
            return OperationFailed("McpConnectionLost", True, f"the server went away: {reason}")
        return OperationFailed("McpServerError", False, f"error {leaf.code}: {reason}")
    if isinstance(leaf, InputRequiredRoundsExceededError):
        return OperationFailed(
            "McpInputRoundsExceeded",
            False,
            f"the server still asked for input after {leaf.max_rounds} round trips; raise "
            "DurableMCPClient(max_round_trips=...) (at most 64) and run a new run id",
        )
    if isinstance(leaf, ValidationError | RuntimeError):
        return OperationFailed("McpInvalidResult", False, f"{type(leaf).__name__}: {reason}")
    if isinstance(leaf, FileNotFoundError):
        return OperationFailed("McpConnectFailed", False, reason)
    if isinstance(
        leaf, OSError | httpx2.TransportError | anyio.BrokenResourceError | anyio.EndOfStream
    ):
        return OperationFailed(
            "McpConnectionLost", True, f"{type(leaf).__name__}: {reason or 'connection lost'}"
        )
    return OperationFailed("McpClientError", False, f"{type(leaf).__name__}: {reason}")


def _leaf(error: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        inner = [e for e in error.exceptions if not isinstance(e, asyncio.CancelledError)]
        error = (inner or list(error.exceptions))[0]
    return error


def serve_mcp(
    registry: HandlerRegistry,
    handler_id: str,
    connect: Connect,
    *,
    timeout: timedelta | float = DEFAULT_TIMEOUT,
    elicitation: ElicitationFnT | None = None,
    sampling: SamplingFnT | None = None,
    roots: ListRootsFnT | None = None,
) -> None:
    """Register the ``mcp_request`` handler ``handler_id``: each request opens a session
    through ``connect`` (the worker's transport and credentials), answers within
    ``timeout`` or fails, and closes it.

    ``elicitation``, ``sampling`` and ``roots`` (the SDK's client callbacks) answer a
    server's input requests during a request that declares that capability, within its
    ``max_round_trips``; they run on the worker, once per live request, never on a replay.
    """
    if not isinstance(registry, HandlerRegistry):
        raise InvalidInput("registry must be a zincir.HandlerRegistry")
    check_id(handler_id, "the mcp_request handler id")
    if not callable(connect):
        raise InvalidInput("connect must be a callable (McpRequest) -> server target")
    seconds = check_positive_duration(timeout, "timeout").total_seconds()
    for name, callback in (("elicitation", elicitation), ("sampling", sampling), ("roots", roots)):
        if callback is not None and not callable(callback):
            raise InvalidInput(f"{name} must be an async callable (the SDK's {name} callback)")
    callbacks = InputCallbacks(elicitation, sampling, roots)

    async def handle(invocation: Invocation) -> McpReply:
        request = McpRequest.from_json(invocation.input_json)
        token = f"{invocation.step_id}#{invocation.sequence}"
        return await perform(
            request, connect, timeout=seconds, progress_token=token, callbacks=callbacks
        )

    registry.register(OperationKind.MCP_REQUEST, handler_id, DocumentHandler(handle))
