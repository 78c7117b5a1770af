"""How a worker reaches an MCP server: a ``Connect`` function and the SDK client it opens.

``Connect`` takes the request document and returns what the SDK's ``mcp.Client`` connects
to: ``StdioServerParameters`` (a subprocess over stdio), a URL or a ``Transport``
(streamable HTTP), or an in-process server. Credentials live here, on the worker: the
request document only ever carries public headers. ``stdio`` and ``streamable_http``
build the two common ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client import Transport, advertise
from mcp.client._transport import TransportStreams
from mcp.client.extension import ClientExtension
from mcp.client.session import ElicitationFnT, ListRootsFnT, MessageHandlerFnT, SamplingFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types import Implementation

from .._errors import InvalidInput
from .._validate import check_positive_duration
from ..contract.payloads import McpRequest

__all__ = ["Connect", "Target", "open_client", "stdio", "streamable_http"]

Target: TypeAlias = Server[Any] | MCPServer | Transport | StdioServerParameters | str
"""What ``mcp.Client`` connects to."""
Connect: TypeAlias = Callable[[McpRequest], Target]
"""Opens the way to the server for one request (called once per request)."""


def stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Connect:
    """Run ``command args…`` as an MCP server over stdio, one process per request.

    ``env`` replaces the SDK's default environment (a few safe variables) when given.
    """
    if not isinstance(command, str) or not command:
        raise InvalidInput("stdio needs the server's command")
    parameters = StdioServerParameters(
        command=command,
        args=[str(arg) for arg in args],
        env=None if env is None else dict(env),
        cwd=cwd,
    )

    def connect(request: McpRequest) -> Target:
        return parameters

    return connect


def streamable_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    timeout: timedelta | float = timedelta(seconds=30),
) -> Connect:
    """Talk streamable HTTP to ``url``; ``headers`` and ``auth`` are the worker's own (they
    may hold credentials) and are sent with the request's public headers."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidInput(f"streamable_http needs an http(s) URL, not {url!r}")
    own = dict(headers or {})
    seconds = check_positive_duration(timeout, "timeout").total_seconds()

    def connect(request: McpRequest) -> Target:
        return _HttpTransport(url, {**request.headers, **own}, auth, seconds)

    return connect


class _HttpTransport(AbstractAsyncContextManager[TransportStreams]):
    """The SDK's streamable-HTTP transport over an HTTP client this transport owns."""

    def __init__(
        self, url: str, headers: dict[str, str], auth: httpx2.Auth | None, timeout: float
    ) -> None:
        self._url, self._headers, self._auth, self._timeout = url, headers, auth, timeout
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> TransportStreams:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=self._headers, auth=self._auth, timeout=httpx2.Timeout(self._timeout)
                )
            )
            streams = await stack.enter_async_context(
                streamable_http_client(self._url, http_client=http)
            )
            self._stack = stack.pop_all()
        return streams

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._stack.__aexit__(exc_type, exc, traceback)


def open_client(
    request: McpRequest,
    connect: Connect,
    *,
    timeout: float,
    message_handler: MessageHandlerFnT | None = None,
    elicitation: ElicitationFnT | None = None,
    sampling: SamplingFnT | None = None,
    roots: ListRootsFnT | None = None,
    tasks: ClientExtension | None = None,
) -> Client:
    """The SDK client for one request: its identity, capabilities and round-trip bound are
    the document's (an input capability is advertised only with its callback); nothing is
    cached between requests."""
    extensions = request.capabilities.get("extensions") or {}
    assert isinstance(extensions, dict)
    chosen = [advertise(name, _settings(value)) for name, value in extensions.items()]
    if tasks is not None:
        chosen = [ext for ext in chosen if ext.identifier != tasks.identifier] + [tasks]
    return Client(
        connect(request),
        client_info=Implementation(name=request.client.name, version=request.client.version),
        input_required_max_rounds=request.max_round_trips,
        read_timeout_seconds=timeout,
        message_handler=message_handler,
        extensions=chosen or None,
        elicitation_callback=elicitation,
        sampling_callback=sampling,
        list_roots_callback=roots,
        cache=None,
    )


def _settings(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None
