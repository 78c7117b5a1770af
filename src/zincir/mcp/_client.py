"""``DurableMCPClient``: MCP requests as ``mcp_request`` operations, replayed from their records.

A request of a client bound to a run is durable: it needs an identity, explicit
(``durable=DurableRequest(step_id, sequence)``) or claimed from the client's
``DurableRequestSequence``, and its input is a ``payloads.McpRequest`` (method, params,
public headers, client identity, capabilities, round-trip bound). The worker registered by
``serve_mcp`` opens the session; a replay returns the stored record without connecting.
A client without a binding sends direct requests through ``session_factory`` instead.

MCP tasks: ``create_task`` is one operation (its record holds the task id), each
``get_task`` poll is its own operation, and ``task_result``/``cancel_task`` one each;
``run_task`` chains them on consecutive identities, so a re-run after a crash replays the
creation and the polls already made, and goes on polling the same task id.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final, TypeVar

import mcp_types
from mcp.client import advertise

from .._errors import InvalidDocument, InvalidInput, McpInputRoundsExceeded, OperationFailed
from .._validate import check_count, check_id, check_positive_duration
from .._version import __version__
from ..agent import DurableBinding, EventSink, deliver_event
from ..agent._durable import success
from ..agent._errors import DurableOperationFailed
from ..agent._preflight import check_handlers
from ..contract import Invocation, OperationKind
from ..contract.payloads import ClientIdentity, EventDelivery, McpRequest
from ..store import OperationKey
from ._connect import Connect
from ._identity import MAX_EVENTS, DurableRequest, DurableRequestSequence, event_identity
from ._reply import McpReply, notification_events, read_result, short_reason
from ._worker import (
    DEFAULT_TIMEOUT,
    INPUT_CAPABILITIES,
    LISTEN_META,
    TASK_META,
    TaskCancelled,
    TaskCreated,
    TaskList,
    TaskStatus,
    check_params,
    perform,
)

__all__ = ["DEFAULT_MAX_PAGES", "DEFAULT_MAX_POLLS", "DurableMCPClient"]

DEFAULT_MAX_PAGES: Final = 100
DEFAULT_MAX_POLLS: Final = 10_000
"""How many ``tasks/get`` polls ``run_task`` makes before giving up (each one a record)."""
_TASK_RESULTS: Final[Mapping[str, type[mcp_types.Result]]] = {
    "tasks/get": TaskStatus,
    "tasks/result": mcp_types.CallToolResult,
    "tasks/cancel": TaskCancelled,
    "tasks/list": TaskList,
}
"""The task methods (an extension on the modern wire): their results, read with the SDK's
models rather than its per-version tables, which leave tasks out."""
R = TypeVar("R", bound=mcp_types.Result)


class DurableMCPClient:
    """An MCP client whose every request, on a bound run, is a durable ``mcp_request``.

    ``binding`` routes requests through its runtime to the ``mcp_request`` handler
    ``handler_id`` (default: its ``Handlers.mcp_request``), registered by ``serve_mcp``.
    ``session_factory`` opens sessions for direct requests (a client without a binding, or
    an agent's direct run). ``client`` names the client to the server; ``headers`` are
    public headers (a credential raises ``SensitiveHeader``: configure it on the worker's
    transport); ``capabilities`` may advertise extensions and declare ``elicitation``,
    ``sampling`` or ``roots`` (answered by the worker's ``serve_mcp`` callbacks);
    ``max_round_trips`` bounds a request's input round trips (``McpInputRoundsExceeded``
    past it); ``timeout`` bounds a direct request.
    """

    def __init__(
        self,
        session_factory: Connect | None,
        binding: DurableBinding | None = None,
        *,
        handler_id: str | None = None,
        client: ClientIdentity | None = None,
        headers: Mapping[str, str] | None = None,
        capabilities: Mapping[str, Any] | None = None,
        max_round_trips: int = 8,
        durable_requests: DurableRequestSequence | None = None,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        max_pages: int = DEFAULT_MAX_PAGES,
    ) -> None:
        if binding is not None and not isinstance(binding, DurableBinding):
            raise InvalidInput("binding must be a zincir.agent.DurableBinding or None")
        run_id = None if binding is None else binding.run_id
        self.run_id = run_id
        if session_factory is None and binding is None:
            raise InvalidInput("a DurableMCPClient needs a binding, a session_factory, or both")
        if session_factory is not None and not callable(session_factory):
            raise InvalidInput("session_factory must be a Connect callable", run_id=run_id)
        self.session_factory = session_factory
        self.binding = binding
        if handler_id is None and binding is not None:
            handler_id = binding.handlers.mcp_request
            if handler_id is None:
                raise InvalidInput(
                    "no mcp_request handler id: pass handler_id=... (the id serve_mcp "
                    "registers) or set Handlers(mcp_request=...)",
                    run_id=run_id,
                )
        self.handler_id: str | None = (
            None if handler_id is None else check_id(handler_id, "the handler id", run_id=run_id)
        )
        if durable_requests is not None:
            if not isinstance(durable_requests, DurableRequestSequence):
                raise InvalidInput(
                    "durable_requests must be a DurableRequestSequence", run_id=run_id
                )
            if binding is None or durable_requests.binding.run_id != binding.run_id:
                raise InvalidInput(
                    "the DurableRequestSequence must belong to the client's binding (same run)",
                    run_id=run_id,
                )
        self.durable_requests = durable_requests
        self.client = (
            client if client is not None else ClientIdentity(name="zincir", version=__version__)
        )
        self.headers = dict(headers or {})
        self.capabilities = _capabilities(capabilities, run_id)
        self.max_round_trips = max_round_trips
        self.timeout = check_positive_duration(timeout, "timeout", run_id=run_id).total_seconds()
        self.max_pages = check_count(max_pages, "max_pages", minimum=1, run_id=run_id)
        self.document("server/discover", {})  # every fixed field checked once, here

    def __repr__(self) -> str:
        return f"DurableMCPClient(handler_id={self.handler_id!r}, run_id={self.run_id!r})"

    # -- the request document and its identity ------------------------------------------

    def document(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        listen: int | None = None,
    ) -> McpRequest:
        """The ``McpRequest`` this client sends for ``method``; bad input raises before
        anything is stored (``SensitiveHeader`` for a credential header)."""
        params = dict(params or {})
        try:
            check_params(method, params)
        except OperationFailed as error:
            raise InvalidInput(error.message, run_id=self.run_id) from None
        routing = dict(meta or {})
        if LISTEN_META in routing:
            raise InvalidInput(f"meta key {LISTEN_META!r} is reserved", run_id=self.run_id)
        if listen is not None:
            routing[LISTEN_META] = {"max_events": listen}
        try:
            return McpRequest(
                method=method,
                params=params,
                meta=routing,
                headers={**self.headers, **(headers or {})},
                client=self.client,
                capabilities=self.capabilities,
                max_round_trips=self.max_round_trips,
            )
        except InvalidDocument as error:
            raise type(error)(error.detail, run_id=self.run_id) from None

    def _identity(self, durable: DurableRequest | None) -> DurableRequest | None:
        if durable is not None:
            if not isinstance(durable, DurableRequest):
                raise InvalidInput("durable must be a DurableRequest", run_id=self.run_id)
            if self.binding is None:
                raise InvalidInput(
                    "a durable request needs a client with a binding", run_id=self.run_id
                )
            return durable
        if self.durable_requests is not None:
            return self.durable_requests.claim()
        if self.binding is not None:
            raise InvalidInput(
                "a request of a bound client needs an identity: pass "
                "durable=DurableRequest(step_id, sequence), or attach "
                "durable_requests=DurableRequestSequence(binding, start) for a sequential branch",
                run_id=self.run_id,
            )
        return None

    def _where(self, identity: DurableRequest | None) -> str:
        if identity is None or self.binding is None:
            return "a direct MCP request"
        return f"{self.binding.step_id(identity.step_id)} #{identity.sequence}"

    # -- sending ----------------------------------------------------------------------------

    async def send(
        self,
        document: McpRequest,
        durable: DurableRequest | None = None,
        *,
        events: EventSink | None = None,
    ) -> tuple[McpReply, DurableRequest | None]:
        """Send ``document`` under its identity (durable) or directly; the reply and identity.

        ``events`` (direct requests only) receives each notification as it arrives.
        """
        identity = self._identity(durable)
        if identity is None:
            return await self.direct(document, events), None
        if events is not None:
            raise InvalidInput(
                "an ordinary event sink on a durable request is refused (a replay would not "
                "call it); use listen_durable, which delivers each notification once through "
                "event_delivery",
                run_id=self.run_id,
            )
        return await self._execute(document, identity), identity

    async def _execute(self, document: McpRequest, identity: DurableRequest) -> McpReply:
        binding, handler_id = self.binding, self.handler_id
        assert binding is not None and handler_id is not None
        invocation = Invocation(
            run_id=binding.run_id,
            step_id=binding.step_id(identity.step_id),
            sequence=identity.sequence,
            kind=OperationKind.MCP_REQUEST,
            handler_id=handler_id,
            input_json=document.to_json(),
        )
        invocation.validate()
        record = await binding.runtime.execute(invocation)
        try:
            output = success(record)
        except DurableOperationFailed as error:
            if error.error != "McpInputRoundsExceeded":
                raise
            raise McpInputRoundsExceeded(
                error.error,
                False,
                f"{self._where(identity)}: {error.message}",
                run_id=binding.run_id,
            ) from None
        try:
            return McpReply.from_json(output)
        except InvalidDocument as error:
            raise InvalidDocument(
                f"the record of {self._where(identity)} holds no McpReply ({error.detail}); "
                f"the mcp_request handler {self.handler_id!r} must be serve_mcp's",
                run_id=self.run_id,
            ) from None

    async def direct(self, document: McpRequest, events: EventSink | None = None) -> McpReply:
        """Send ``document`` on a session of this process, nothing stored; ``events``
        receives each notification as it arrives. Failures raise ``OperationFailed``."""
        if self.session_factory is None:
            raise InvalidInput(
                "this client has no session_factory, so it sends durable requests only",
                run_id=self.run_id,
            )
        count = 0
        raised: list[Exception] = []

        async def notified(data: dict[str, Any]) -> None:
            nonlocal count
            if events is None or raised:
                return
            event = EventDelivery(
                name=data["method"], data=data.get("params"), source="mcp", index=count
            )
            count += 1
            try:
                delivered = events(event)
                if inspect.isawaitable(delivered):
                    await delivered
            except Exception as error:  # noqa: BLE001 - raised once the request is over
                raised.append(error)

        try:
            reply = await perform(
                document,
                self.session_factory,
                timeout=self.timeout,
                notified=None if events is None else notified,
            )
        except OperationFailed as error:
            kind = (
                McpInputRoundsExceeded
                if error.error == "McpInputRoundsExceeded"
                else OperationFailed
            )
            raise kind(error.error, error.retryable, error.message, run_id=self.run_id) from None
        if raised:
            raise raised[0]
        return reply

    def _typed(
        self, method: str, reply: McpReply, identity: DurableRequest | None, expected: type[R]
    ) -> R:
        where = self._where(identity)
        if method in _TASK_RESULTS or expected is TaskCreated:
            return self._task_typed(method, reply, where, expected)
        result = read_result(method, reply, where, self.run_id or "")
        if not isinstance(result, expected):
            raise InvalidDocument(
                f"the result of {where} is a {type(result).__name__}, not {expected.__name__}",
                run_id=self.run_id,
            )
        return result

    def _task_typed(self, method: str, reply: McpReply, where: str, expected: type[R]) -> R:
        try:
            return expected.model_validate(reply.result, by_name=False)
        except ValueError as error:
            raise InvalidDocument(
                f"the record of {where} holds no valid {method} result "
                f"({expected.__name__}): {short_reason(error)}",
                run_id=self.run_id,
            ) from None

    # -- the generic request and the typed helpers ------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        durable: DurableRequest | None = None,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        events: EventSink | None = None,
    ) -> dict[str, Any]:
        """One MCP operation (``tools/call``, ``resources/read``, …); its result as JSON."""
        document = self.document(method, params, meta=meta, headers=headers)
        reply, _ = await self.send(document, durable, events=events)
        return dict(reply.result)

    async def discover(
        self, *, durable: DurableRequest | None = None
    ) -> mcp_types.DiscoverResult | mcp_types.InitializeResult:
        """The server's identity, capabilities and instructions as negotiated."""
        reply, identity = await self.send(self.document("server/discover"), durable)
        return self._typed(
            "server/discover",
            reply,
            identity,
            mcp_types.DiscoverResult | mcp_types.InitializeResult,  # type: ignore[arg-type]
        )

    async def _listing(
        self, method: str, field: str, result: type[R], durable: DurableRequest | None
    ) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        identity = durable
        for _ in range(self.max_pages):
            params = {} if cursor is None else {"cursor": cursor}
            reply, used = await self.send(self.document(method, params), identity)
            page = self._typed(method, reply, used, result)
            items.extend(getattr(page, field))
            cursor = getattr(page, "next_cursor", None)
            if cursor is None:
                return items
            identity = None if identity is None else identity.next()
        raise InvalidDocument(
            f"{method} still had a next page after {self.max_pages} pages; raise "
            "DurableMCPClient(max_pages=...) if the server really lists that much",
            run_id=self.run_id,
        )

    async def list_tools(self, *, durable: DurableRequest | None = None) -> list[mcp_types.Tool]:
        """Every tool, page by page (each page its own request)."""
        return await self._listing("tools/list", "tools", mcp_types.ListToolsResult, durable)

    async def list_resources(
        self, *, durable: DurableRequest | None = None
    ) -> list[mcp_types.Resource]:
        """Every resource, page by page (each page its own request)."""
        return await self._listing(
            "resources/list", "resources", mcp_types.ListResourcesResult, durable
        )

    async def list_resource_templates(
        self, *, durable: DurableRequest | None = None
    ) -> list[mcp_types.ResourceTemplate]:
        """Every resource template, page by page (each page its own request)."""
        return await self._listing(
            "resources/templates/list",
            "resource_templates",
            mcp_types.ListResourceTemplatesResult,
            durable,
        )

    async def list_prompts(
        self, *, durable: DurableRequest | None = None
    ) -> list[mcp_types.Prompt]:
        """Every prompt, page by page (each page its own request)."""
        return await self._listing("prompts/list", "prompts", mcp_types.ListPromptsResult, durable)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        durable: DurableRequest | None = None,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        events: EventSink | None = None,
    ) -> mcp_types.CallToolResult:
        """Call tool ``name``; a tool's own error is a result with ``is_error``."""
        document = self.document(
            "tools/call", _tool_params(name, arguments), meta=meta, headers=headers
        )
        reply, identity = await self.send(document, durable, events=events)
        return self._typed("tools/call", reply, identity, mcp_types.CallToolResult)

    async def read_resource(
        self,
        uri: str,
        *,
        durable: DurableRequest | None = None,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> mcp_types.ReadResourceResult:
        """Read the resource at ``uri``."""
        document = self.document("resources/read", {"uri": uri}, meta=meta, headers=headers)
        reply, identity = await self.send(document, durable)
        return self._typed("resources/read", reply, identity, mcp_types.ReadResourceResult)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        durable: DurableRequest | None = None,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> mcp_types.GetPromptResult:
        """The prompt ``name`` rendered with ``arguments``."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        document = self.document("prompts/get", params, meta=meta, headers=headers)
        reply, identity = await self.send(document, durable)
        return self._typed("prompts/get", reply, identity, mcp_types.GetPromptResult)

    # -- MCP tasks ------------------------------------------------------------------------

    async def create_task(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        ttl: int | None = None,
        durable: DurableRequest | None = None,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> mcp_types.Task:
        """Call tool ``name`` as a task (``ttl`` in ms asked of the server); one operation,
        whose record holds the task, so a replay never creates a second one."""
        routing = {**(meta or {}), TASK_META: {} if ttl is None else {"ttl": ttl}}
        document = self.document(
            "tools/call", _tool_params(name, arguments), meta=routing, headers=headers
        )
        reply, identity = await self.send(document, durable)
        return self._typed("tools/call", reply, identity, TaskCreated).task

    async def get_task(
        self, task_id: str, *, durable: DurableRequest | None = None
    ) -> mcp_types.GetTaskResult:
        """One poll of task ``task_id``: its status as the server reports it now."""
        reply, identity = await self.send(self.document("tasks/get", {"taskId": task_id}), durable)
        return self._typed("tasks/get", reply, identity, TaskStatus)

    async def task_result(
        self, task_id: str, *, durable: DurableRequest | None = None
    ) -> mcp_types.CallToolResult:
        """The result of the tool call task ``task_id`` ran (``tasks/result``)."""
        document = self.document("tasks/result", {"taskId": task_id})
        reply, identity = await self.send(document, durable)
        return self._typed("tasks/result", reply, identity, mcp_types.CallToolResult)

    async def cancel_task(
        self, task_id: str, *, durable: DurableRequest | None = None
    ) -> mcp_types.CancelTaskResult:
        """Ask the server to cancel task ``task_id``; the task as it stands after."""
        document = self.document("tasks/cancel", {"taskId": task_id})
        reply, identity = await self.send(document, durable)
        return self._typed("tasks/cancel", reply, identity, TaskCancelled)

    async def list_tasks(self, *, durable: DurableRequest | None = None) -> list[mcp_types.Task]:
        """Every task the server lists, page by page (each page its own request)."""
        return await self._listing("tasks/list", "tasks", TaskList, durable)

    async def run_task(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        ttl: int | None = None,
        durable: DurableRequest | None = None,
        poll_interval: timedelta | float | None = None,
        max_polls: int = DEFAULT_MAX_POLLS,
    ) -> mcp_types.CallToolResult:
        """Create a task, poll it until it ends, and return its result.

        Each step is its own operation on consecutive identities (``durable``,
        ``durable.next()``, … or claimed from the sequence): the creation, every
        ``tasks/get`` poll, then ``tasks/result``. A task may run for an hour; a process
        killed meanwhile re-runs by replaying the creation (never a second task) and the
        polls already recorded (without waiting between them), then polls the same task id
        live. Live polls are ``poll_interval`` apart (default: the server's suggestion, else
        1 s).
        """
        check_count(max_polls, "max_polls", minimum=1, run_id=self.run_id)
        fixed = (
            None
            if poll_interval is None
            else check_positive_duration(poll_interval, "poll_interval", run_id=self.run_id)
        )
        task = await self.create_task(name, arguments, ttl=ttl, durable=durable)
        identity = None if durable is None else durable.next()
        status: mcp_types.Task = task
        for _ in range(max_polls):
            if status.status in ("completed", "failed"):
                return await self.task_result(task.task_id, durable=identity)
            if status.status == "cancelled":
                raise OperationFailed(
                    "McpTaskCancelled",
                    False,
                    f"MCP task {task.task_id!r} of tool {name!r} was cancelled before it "
                    "finished; start the work again under a new identity or run id",
                    run_id=self.run_id,
                )
            wait = (
                fixed.total_seconds()
                if fixed is not None
                else (status.poll_interval or 1000) / 1000
            )
            if not await self._recorded(identity):
                await asyncio.sleep(wait)
            status = await self.get_task(task.task_id, durable=identity)
            identity = None if identity is None else identity.next()
        raise OperationFailed(
            "McpTaskTooLong",
            False,
            f"MCP task {task.task_id!r} of tool {name!r} was still {status.status} after "
            f"{max_polls} polls; raise run_task(max_polls=...) or poll_interval",
            run_id=self.run_id,
        )

    async def _recorded(self, identity: DurableRequest | None) -> bool:
        """Whether ``identity``'s request finished before (a replayed poll need not wait)."""
        binding = self.binding
        if identity is None or binding is None:
            return False
        try:
            store = binding.run_store()
        except InvalidInput:  # a runtime without a store of its own: wait as when live
            return False
        key = OperationKey(binding.run_id, binding.step_id(identity.step_id), identity.sequence)
        row = await store.get_operation(key)
        return row is not None and row.status == "completed"

    # -- durable subscriptions ----------------------------------------------------------

    async def listen_json_durable(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        durable: DurableRequest | None = None,
        max_events: int = 100,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``request``, keeping the notifications the server sends while it runs (at most
        ``max_events``): each is validated, then delivered once through its own
        ``event_delivery`` operation (step ``<step>.event``, sequence
        ``parent * 1000 + index``); a retry redelivers none already delivered. The result
        is returned once every notification is delivered."""
        reply, _ = await self._listen(method, params, durable, max_events, meta, headers)
        return dict(reply.result)

    async def listen_durable(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        durable: DurableRequest | None = None,
        max_events: int = 100,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> mcp_types.Result:
        """``listen_json_durable``, with the result as the SDK's model of ``method``."""
        reply, identity = await self._listen(method, params, durable, max_events, meta, headers)
        return read_result(method, reply, self._where(identity), self.run_id or "")

    async def _listen(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        durable: DurableRequest | None,
        max_events: int,
        meta: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> tuple[McpReply, DurableRequest]:
        binding = self.binding
        if binding is None:
            raise InvalidInput(
                "durable delivery on a direct request is refused: this client has no "
                "binding; pass events= to a direct request for an ordinary event sink"
            )
        check_count(max_events, "max_events", minimum=1, maximum=MAX_EVENTS, run_id=self.run_id)
        document = self.document(method, params, meta=meta, headers=headers, listen=max_events)
        check_handlers(
            binding, {OperationKind.EVENT_DELIVERY: f"listen_durable delivers {method} events"}
        )
        identity = self._identity(durable)
        assert identity is not None
        reply = await self._execute(document, identity)
        where = self._where(identity)
        events = notification_events(reply, identity.sequence, where, binding.run_id)
        for index, event in enumerate(events):
            target = event_identity(identity, index, run_id=binding.run_id)
            await deliver_event(binding, target.step_id, target.sequence, event)
        return reply, identity


def _tool_params(name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = dict(arguments)
    return params


def _capabilities(capabilities: Mapping[str, Any] | None, run_id: str | None) -> dict[str, Any]:
    """Extensions, and the input capabilities the worker answers with its callbacks."""
    chosen = dict(capabilities or {})
    unknown = sorted(set(chosen) - {"extensions", *INPUT_CAPABILITIES})
    if unknown:
        raise InvalidInput(
            f"capabilities {unknown} cannot be served by an MCP worker; only "
            '{"extensions": {identifier: settings}} and "elicitation", "sampling", "roots" '
            "(answered by serve_mcp's callbacks of those names) are advertised",
            run_id=run_id,
        )
    for name in INPUT_CAPABILITIES:
        if name in chosen and not isinstance(chosen[name], Mapping):
            raise InvalidInput(f"capabilities[{name!r}] must be an object ({{}})", run_id=run_id)
    extensions = chosen.get("extensions", {})
    if not isinstance(extensions, Mapping):
        raise InvalidInput("capabilities['extensions'] must be an object", run_id=run_id)
    for identifier, settings in extensions.items():
        try:
            advertise(identifier, dict(settings) if isinstance(settings, Mapping) else None)
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"extension {identifier!r}: {error}", run_id=run_id) from None
    return chosen
