"""A scripted OpenAI-compatible chat-completions server on loopback, with faults per run.

Stdlib only (``http.server``), so the scenario needs no test code. Each request names its
run in the prompt (``[run ID]``); the answer follows from the conversation it carries, so
a request asked again gets the same answer:

    no assistant message yet         ``lookup_weather`` (malformed JSON, or a city that
                                     makes the tool raise, if the run's plan says so)
    a lookup result, no report yet   ``write_report`` with the looked-up figures
    a report result                  the final text ``Report filed for CITY.``

A run's ``Plan`` injects faults into its request after the lookup (the second model
request): a 503 outage or a refused connection for some seconds, 429s with
``Retry-After``, or a request held until the scenario has SIGKILLed its client. Every
request is recorded with what it was answered, so the scenario can count per run the
requests that finished (answered 200) against the run's stored model-request records.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CITY_THAT_RAISES", "ChatServer", "Plan", "Served", "prompt_for"]

CITY_THAT_RAISES = "Atlantis"
"""The city ``lookup_weather`` raises for (``ValueError("weather service down …")``)."""
_RUN_TAG = re.compile(r"\[run ([A-Za-z0-9_.:-]+)\]")
_MALFORMED = '{"city": "%s"'  # a JSON object cut short: a common real-model failure


def prompt_for(run_id: str, city: str) -> str:
    """The prompt of run ``run_id``: the server finds the run by its tag."""
    return f"Write the weather report for {city}. [run {run_id}]"


@dataclass
class Plan:
    """The faults one run meets. ``outage`` seconds of 503s (``refuse``: refused
    connections) from its second model request on; ``rate_limits`` 429s with
    ``Retry-After: retry_after``; ``hold``: the second request is held (never answered)
    until ``release`` is called, after ``on_hold`` was told."""

    city: str
    malformed: bool = False
    raising: bool = False
    outage: float = 0.0
    refuse: bool = False
    rate_limits: int = 0
    retry_after: float = 0.0
    hold: bool = False
    on_hold: Callable[[], None] | None = None
    released: threading.Event = field(default_factory=threading.Event)
    outage_until: float | None = None
    outage_started: float | None = None
    limited: int = 0
    malformed_sent: bool = False

    def release(self) -> None:
        """Let a held request go: it is closed unanswered (its client is dead by now)."""
        self.released.set()


@dataclass(frozen=True)
class Served:
    """One request as the server saw it: its run, its number among the run's requests
    counted by the assistant messages it carries, what it was answered, and when."""

    run_id: str
    turn: int
    status: int | str
    at: float
    saw_tool_error: bool


class _Listener:
    """One listening port; ``pause`` closes it (connections are refused) and reopens it on
    the same port after a while."""

    def __init__(self, owner: ChatServer, port: int = 0) -> None:
        self.owner = owner
        self.server = _HTTPServer(("127.0.0.1", port), _Handler)
        self.server.chat = owner
        self.server.listener = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.lock = threading.Lock()

    def pause(self, seconds: float) -> None:
        """Stop listening now, listen again after ``seconds`` (from a handler thread)."""
        with self.lock:
            self.server.shutdown()
            self.server.server_close()
        timer = threading.Timer(seconds, self._reopen)
        timer.daemon = True
        timer.start()

    def _reopen(self) -> None:
        with self.lock:
            if self.owner.closed:
                return
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.server = _HTTPServer(("127.0.0.1", self.port), _Handler)
                    break
                except OSError:  # the port is still in TIME_WAIT or taken for a moment
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self.server.chat = self.owner
            self.server.listener = self
            self.thread = threading.Thread(
                target=self.server.serve_forever, args=(0.05,), daemon=True
            )
            self.thread.start()

    def close(self) -> None:
        with self.lock:
            self.server.shutdown()
            self.server.server_close()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    chat: ChatServer
    listener: _Listener


class ChatServer:
    """The server: ``plan`` a run, point an ``AsyncOpenAI`` at ``base_url()`` (or at
    ``own_port``'s URL for a run whose connections are refused), read ``served``."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self.served: list[Served] = []
        self.lock = threading.Lock()
        self.closed = False
        self._main = _Listener(self)
        self._own: dict[str, _Listener] = {}

    def base_url(self, run_id: str | None = None) -> str:
        """The API's base URL: the shared port, or the run's own port if it has one."""
        listener = self._own.get(run_id or "", self._main)
        return f"http://127.0.0.1:{listener.port}/v1"

    def plan(self, run_id: str, plan: Plan) -> None:
        """Script run ``run_id``; a run whose connections are refused gets a port of its own."""
        self.plans[run_id] = plan
        if plan.refuse:
            self._own[run_id] = _Listener(self)

    def requests(self, run_id: str) -> list[Served]:
        with self.lock:
            return [served for served in self.served if served.run_id == run_id]

    def close(self) -> None:
        self.closed = True
        for plan in self.plans.values():
            plan.release()
        for listener in [self._main, *self._own.values()]:
            try:
                listener.close()
            except OSError:
                pass

    def answer(self, body: dict[str, Any], listener: _Listener) -> tuple[int | str, Any, float]:
        """(status or ``"drop"``/``"held"``, body, Retry-After) for one request; records it."""
        messages = body.get("messages") or []
        run_id, city = _run_of(messages)
        plan = self.plans.get(run_id or "")
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        results = {
            str(message.get("tool_call_id")): str(message.get("content"))
            for message in messages
            if message.get("role") == "tool"
        }
        saw_error = any(CITY_THAT_RAISES in content for content in results.values())
        status, reply, retry_after = self._judge(plan, turn, listener)
        if status == 200:
            reply = _reply(plan, city, turn, results)
        with self.lock:
            self.served.append(Served(run_id or "?", turn, status, time.time(), saw_error))
        return status, reply, retry_after

    def _judge(self, plan: Plan | None, turn: int, listener: _Listener) -> tuple[Any, Any, float]:
        if plan is None:
            return 400, _error("no such run in the script"), 0.0
        if turn != 1:
            return 200, None, 0.0
        if plan.hold and not plan.released.is_set():
            if plan.on_hold is not None:
                plan.on_hold()
            plan.released.wait(120)
            plan.hold = False
            return "held", None, 0.0
        now = time.monotonic()
        if plan.outage > 0 and plan.outage_until is None:
            plan.outage_until = now + plan.outage
            plan.outage_started = time.time()
            if plan.refuse:
                listener.pause(plan.outage)
                return "drop", None, 0.0
        if plan.outage_until is not None and now < plan.outage_until:
            return 503, _error("the service is unavailable"), 0.0
        if plan.limited < plan.rate_limits:
            plan.limited += 1
            return 429, _error("rate limited"), plan.retry_after
        return 200, None, 0.0


def _run_of(messages: list[dict[str, Any]]) -> tuple[str | None, str]:
    for message in messages:
        if message.get("role") == "user":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            found = _RUN_TAG.search(text)
            city = re.search(r"report for (\w+)", text)
            if found:
                return found.group(1), city.group(1) if city else "Oslo"
    return None, "Oslo"


def _reply(plan: Plan | None, city: str, turn: int, results: dict[str, str]) -> dict[str, Any]:
    if "call-report" in results:
        return _completion(f"Report filed for {city}.", None)
    if "call-lookup" in results:
        arguments = json.dumps({"city": city, "summary": results["call-lookup"][:200]})
        return _completion(None, [_call("call-report", "write_report", arguments)])
    if plan is not None and plan.malformed and not plan.malformed_sent:
        plan.malformed_sent = True  # once: the request after it carries the retry prompt
        return _completion(None, [_call("call-bad", "lookup_weather", _MALFORMED % city)])
    if turn == 0 and plan is not None and plan.raising:
        arguments = json.dumps({"city": CITY_THAT_RAISES})
        return _completion(None, [_call("call-raises", "lookup_weather", arguments)])
    return _completion(None, [_call("call-lookup", "lookup_weather", json.dumps({"city": city}))])


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _completion(content: str | None, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-faults",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "code": None}}


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        status, reply, retry_after = self.server.chat.answer(body, self.server.listener)
        if not isinstance(status, int):  # dropped or held: close without an answer
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after:
            self.send_header("Retry-After", f"{retry_after:g}")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the scenario reads ``ChatServer.served`` instead."""
