"""A local HTTP server that speaks the chat-completions protocol for a scripted conversation.

Each POST to ``/v1/chat/completions`` takes the next ``Reply`` of the script: a JSON body,
or SSE chunks followed by ``data: [DONE]``. The server records every request body and its
headers (and when it came) so tests can assert what the SDK sent. ``outage`` answers every
request with an error for a while, taking no reply of the script.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

API_KEY = "sk-test-0123456789"


@dataclass
class Reply:
    """One scripted answer: ``body`` as JSON, or ``chunks`` as an SSE stream (which, with
    ``stall_after``, stops after that many chunks and never ends)."""

    body: dict[str, Any] | None = None
    chunks: list[dict[str, Any]] | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    stall_after: int | None = None


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]
    at: float = 0.0  # time.monotonic() when it arrived
    status: int = 200


class ChatServer:
    """The scripted server; ``replies`` are served in order, one per request."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.clients: list[openai.AsyncOpenAI] = []
        self.outage_until = 0.0
        self.outage_reply = Reply()
        self.fallback: Reply | None = None  # served once the script is exhausted

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        self.replies.clear()
        self.received.clear()
        self.clients.clear()
        self.outage_until = 0.0
        self.fallback = None

    def outage(self, seconds: float, reply: Reply | None = None) -> None:
        """Answer every request of the next ``seconds`` with ``reply`` (default: a 503)."""
        self.outage_reply = reply or error(503, "the service is unavailable")
        self.outage_until = time.monotonic() + seconds

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def client(self) -> openai.AsyncOpenAI:
        """An SDK client for this server, without the SDK's own retries."""
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=API_KEY, max_retries=0)
        self.clients.append(client)
        return client

    async def close_clients(self) -> None:
        for client in self.clients:
            await client.close()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [received.body for received in self.received]

    async def _completions(self, request: Request) -> Response:
        received = Received(await request.json(), dict(request.headers), time.monotonic())
        self.received.append(received)
        if received.at < self.outage_until:
            reply = self.outage_reply
        elif not self.replies and self.fallback is not None:
            reply = self.fallback
        elif not self.replies:
            received.status = 500
            return JSONResponse({"error": {"message": "the script is exhausted"}}, 500)
        else:
            reply = self.replies.popleft()
        received.status = reply.status
        if reply.chunks is None:
            return JSONResponse(reply.body or {}, reply.status, headers=reply.headers)
        return StreamingResponse(
            _sse(reply.chunks, reply.stall_after),
            reply.status,
            reply.headers,
            media_type="text/event-stream",
        )


async def _sse(chunks: Iterable[dict[str, Any]], stall_after: int | None) -> AsyncIterator[bytes]:
    for sent, chunk in enumerate(chunks):
        if sent == stall_after:
            await asyncio.sleep(3600)  # until the client goes away
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


@contextmanager
def chat_server(port: int = 0) -> Iterator[ChatServer]:
    """Serve a ``ChatServer`` on ``port`` of 127.0.0.1 (default: a free one) in a thread,
    for the block."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: a reply's writes go out at once, not after the
    # client's delayed ACK (about 40 ms per request otherwise)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", port))
    server = ChatServer(sock.getsockname()[1])
    app = Starlette(routes=[Route("/v1/chat/completions", server._completions, methods=["POST"])])
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the chat-completions test server did not start")
        time.sleep(0.01)
    try:
        yield server
    finally:
        uvicorn_server.should_exit = True
        thread.join(10)
        sock.close()


# -- response builders ------------------------------------------------------------------------


def usage(prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **extra,
    }


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str = "stop",
    usage_: dict[str, Any] | None = None,
    completion_id: str = "chatcmpl-1",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test-2026",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage_ if usage_ is not None else usage(10, 5),
    }


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed chunk; with ``usage_`` and no delta, the final usage-only chunk."""
    choices = []
    if delta is not None or finish_reason is not None:
        choices = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-test-2026",
        "choices": choices,
        "usage": usage_,
    }


def call_delta(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """A delta carrying one tool-call fragment (the first names the call and the tool)."""
    update: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        update["id"] = call_id
        update["type"] = "function"
    if name is not None:
        update["function"]["name"] = name
    return {"tool_calls": [update]}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(body=body, status=status, headers=headers or {})
