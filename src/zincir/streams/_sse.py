"""A run's durable stream served as Server-Sent Events (Starlette, the ``ui`` extra).

``GET /runs/{run_id}/stream`` sends each item as ``id: <offset>``, ``event: <kind>``,
``data: <payload JSON>``; a reconnecting ``EventSource`` sends ``Last-Event-ID`` and gets
the items after it. The response ends after the run's ``result`` item.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._validate import MAX_SEQUENCE

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "KEEP_ALIVE_S",
    "RETRY_MS",
    "Authorize",
    "is_loopback",
    "sse_app",
    "stream_endpoint",
]

KEEP_ALIVE_S = 15.0  # a comment line after this many seconds without an item
RETRY_MS = 1_000  # how soon a browser reconnects after the connection drops
MAX_OFFSET_DIGITS = 18
Authorize = Callable[["Request"], "bool | Awaitable[bool]"]


def is_loopback(host: str | None) -> bool:
    """Whether a client address is loopback (127.0.0.0/8, ::1, or IPv4-mapped loopback)."""
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _offset(text: str | None) -> int | None:
    """A non-negative offset from a header or query value; None when absent; ValueError when
    it is anything but ASCII digits."""
    if text is None or text.strip() == "":
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_OFFSET_DIGITS:
        raise ValueError(text)
    return min(int(text), MAX_SEQUENCE)


def _event(offset: int, kind: str, payload: Any) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"id: {offset}\nevent: {kind}\ndata: {data}\n\n".encode()


def sse_app(
    store: Any, authorize: Authorize | None = None, *, keep_alive: float = KEEP_ALIVE_S
) -> Starlette:
    """A Starlette app serving ``GET /runs/{run_id}/stream`` from ``store`` as Server-Sent
    Events; mount it in your own app. ``authorize(request)`` (sync or async) says whether a
    request may read; without it only loopback clients may (anything else gets 403).
    """
    _require_starlette()
    from starlette.applications import Starlette
    from starlette.routing import Route

    endpoint = stream_endpoint(store, authorize, keep_alive=keep_alive)
    return Starlette(routes=[Route("/runs/{run_id:path}/stream", endpoint, methods=["GET"])])


def _require_starlette() -> None:
    try:
        import starlette  # noqa: F401
    except ImportError as error:  # pragma: no cover - exercised without the extra
        raise ImportError(
            f'zincir.streams.sse_app needs the "ui" extra ({error.name} is missing): '
            'pip install "zincir[ui]"'
        ) from error


def stream_endpoint(
    store: Any,
    authorize: Authorize | None = None,
    *,
    keep_alive: float = KEEP_ALIVE_S,
) -> Callable[[Request], Awaitable[Response]]:
    """The request handler behind :func:`sse_app` (the run id is the ``run_id`` path
    parameter), for an app that routes it itself; ``store`` is a store or any
    :class:`~zincir.streams._read.StreamSource` with ``stream_tail`` (the inspector's
    read-only view)."""
    _require_starlette()
    import anyio
    from starlette.responses import JSONResponse, Response, StreamingResponse

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}

    def refuse(status: int, message: str, run_id: str | None = None) -> Response:
        body: dict[str, Any] = {"error": message, "status": status}
        if run_id is not None:
            body["run_id"] = run_id
        return JSONResponse(body, status_code=status, headers={"cache-control": "no-store"})

    class EventStream(StreamingResponse):
        """Streams until the body ends or the client goes away, whatever the server's
        ASGI version (a dropped client cancels the read at once)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async with anyio.create_task_group() as group:

                async def body() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(body)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()

    from ._read import follow

    async def events(run_id: str, after: int) -> AsyncIterator[bytes]:
        yield f"retry: {RETRY_MS}\n\n".encode()
        queue: asyncio.Queue[tuple[int, str, Any] | None] = asyncio.Queue(maxsize=256)

        async def pump() -> None:
            try:
                async for item in follow(store, run_id, after):
                    await queue.put((item.offset, item.kind, item.payload))
            finally:
                await queue.put(None)

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    found = await asyncio.wait_for(queue.get(), keep_alive)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if found is None:
                    break
                offset, kind, payload = found
                yield _event(offset, kind, payload)
                if kind == "result":
                    break
        finally:
            task.cancel()  # a failed read ends the response; the client reconnects
            await asyncio.gather(task, return_exceptions=True)

    async def stream(request: Request) -> Response:
        run_id = str(request.path_params["run_id"])
        allowed: bool | Awaitable[bool]
        if authorize is None:
            allowed = is_loopback(request.client.host if request.client else None)
        else:
            allowed = authorize(request)
            if inspect.isawaitable(allowed):
                allowed = await allowed
        if not allowed:
            return refuse(
                403,
                "this stream only answers loopback clients unless the app's authorize hook "
                "allows the request: pass sse_app(store, authorize=...)",
                run_id,
            )
        try:
            header = _offset(request.headers.get("last-event-id"))
            query = _offset(request.query_params.get("after"))
        except ValueError:
            return refuse(
                400,
                "Last-Event-ID and ?after= must be a non-negative integer offset",
                run_id,
            )
        after = header if header is not None else (query or 0)
        if await store.get_run(run_id) is None:
            return refuse(404, f"no run has the id {run_id!r} in this store", run_id)
        tail = await store.stream_tail(run_id)
        if tail is not None and tail.kind == "result" and after >= tail.offset:
            return Response(status_code=204, headers=headers)  # EventSource stops reconnecting
        return EventStream(events(run_id, after), media_type="text/event-stream", headers=headers)

    return stream
