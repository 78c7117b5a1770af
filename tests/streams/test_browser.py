"""examples/stream_web in real Chromium: the page's EventSource follows a run's durable
stream across a server restart (Last-Event-ID) and ends with exactly the final answer.

Needs /usr/bin/chromium (Debian package ``chromium``); skips without it, except under CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason='sse_app needs the "ui" extra')
pytest.importorskip("uvicorn", reason='sse_app needs the "ui" extra')

import zincir  # noqa: E402
from tests.inspector.cdp import Browser, chromium_page  # noqa: E402
from tests.inspector.test_browser import require_chromium  # noqa: E402
from tests.postgres_server import free_port  # noqa: E402
from zincir.store import Lease, NewStreamItem  # noqa: E402

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "examples" / "stream_web" / "server.py"
RUN_ID = "web-1"
FIRST_TRY = "The weather in Oslo is light rain and 14 °C."  # dies mid-answer
ANSWER = 'Oslo: light rain, a high of 14 °C.\nTake an umbrella — and "quotes" <b>stay</b> text.'


def item(kind: str, payload: dict[str, Any], key: str | None = None) -> NewStreamItem:
    return NewStreamItem(kind, json.dumps(payload), key)


def deltas(request: int, text: str, size: int) -> list[NewStreamItem]:
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [
        item("part_start", {"request": request, "index": 0, "part_kind": "text"}),
        *(item("part_delta", {"request": request, "index": 0, "delta": p}) for p in pieces),
    ]


def message(request: int, parts: list[dict[str, Any]]) -> NewStreamItem:
    return item("message", {"request": request, "response": {"parts": parts}}, f"message:{request}")


class Writer:
    """Appends to the run's stream from this process, as the run's owner."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.lease: Lease = asyncio.run(self._call(self._create))
        self.count = 0

    async def _create(self, store: Any) -> Lease:
        lease: Lease = await store.create_run(
            RUN_ID, name="web", owner="test-writer", ttl=timedelta(minutes=10)
        )
        return lease

    async def _call(self, action: Any) -> Any:
        store = zincir.open_store(self.db)
        try:
            return await action(store)
        finally:
            await store.close()

    def append(self, items: Sequence[NewStreamItem]) -> None:
        async def write(store: Any) -> list[int]:
            found: list[int] = await store.append_stream(self.lease, items)
            return found

        self.count += len(asyncio.run(self._call(write)))


@contextmanager
def example_server(db: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """examples/stream_web/server.py on ``port``; SIGKILLed on exit if still running."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), str(db), str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the example server did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()


def wait_received(page: Browser, count: int) -> None:
    page.wait_for(f"window.received && window.received.length >= {count}", timeout=30)


def test_the_page_follows_a_run_across_a_server_restart(tmp_path: Path) -> None:
    browser = require_chromium()
    db, log, port = tmp_path / "zincir.db", tmp_path / "server.log", free_port()
    writer = Writer(db)
    tool_call = {
        "type": "tool_call",
        "tool_call_id": "call_1",
        "tool_name": "get_weather",
        "arguments": {"city": "Oslo"},
    }
    writer.append(
        [
            item(
                "part_start",
                {
                    "request": 1,
                    "index": 0,
                    "part_kind": "tool-call",
                    "tool_call_id": "call_1",
                    "tool_name": "get_weather",
                },
            ),
            item("part_delta", {"request": 1, "index": 0, "delta": '{"city": "Oslo"}'}),
            item("part_end", {"request": 1, "index": 0}),
            message(1, [tool_call]),
            item(
                "tool_result",
                {
                    "request": 1,
                    "tool_call_id": "call_1",
                    "tool_name": "get_weather",
                    "content": {"sky": "light rain", "high_c": 14},
                    "is_error": False,
                },
                "tool_result:call_1",
            ),
            *deltas(2, FIRST_TRY[:20], 4),
        ]
    )
    with chromium_page(browser, tmp_path / "profile") as page:
        first = example_server(db, port, log)
        with first as process:
            page.open(f"http://127.0.0.1:{port}/?run={RUN_ID}")
            wait_received(page, writer.count)
            assert page.evaluate("document.getElementById('answer').textContent") == FIRST_TRY[:20]
            writer.append(deltas(2, FIRST_TRY[20:], 5)[1:])
            wait_received(page, writer.count)
            process.send_signal(signal.SIGKILL)  # the server dies mid-answer
            process.wait()
        seen = page.evaluate("window.received.length")
        # while the server is down: the worker dies too; the request is re-run after a void
        writer.append([item("void", {"request": 2}, f"void:2:{writer.count}")])
        writer.append(deltas(2, ANSWER[:30], 3))
        with example_server(db, port, log):
            page.wait_for("window.opens >= 2", timeout=30)
            writer.append(deltas(2, ANSWER[30:], 7)[1:])
            writer.append([item("part_end", {"request": 2, "index": 0})])
            writer.append([message(2, [{"type": "text", "text": ANSWER}])])
            writer.append([item("result", {"status": "completed", "output": ANSWER}, "result")])
            page.wait_for("window.finished === true", timeout=30)
            received = page.evaluate("window.received")
            answer = page.evaluate("document.getElementById('answer').textContent")
            turns = page.evaluate(
                "[...document.querySelectorAll('#conversation .turn')].map(n => n.textContent)"
            )
            time.sleep(1.5)  # the closed EventSource does not come back
            assert page.evaluate("window.received.length") == len(received)
    assert seen < writer.count  # the restart came mid-stream
    assert received == list(range(1, writer.count + 1))  # each offset once, none missing
    assert answer == ANSWER
    assert turns == [
        'get_weather({"city":"Oslo"})\n'.join(["→ ", ""]),
        'get_weather ⇒ {"sky":"light rain","high_c":14}',
        ANSWER,
    ]


def test_the_inspectors_run_page_follows_a_live_run(tmp_path: Path) -> None:
    from tests.inspector.ui_process import ui_server
    from zincir.inspector._app import run_url

    browser = require_chromium()
    db = tmp_path / "zincir.db"
    writer = Writer(db)
    writer.append(deltas(1, FIRST_TRY[:12], 4))
    with ui_server(db, tmp_path) as base, chromium_page(browser, tmp_path / "profile") as page:
        page.open(base + run_url(RUN_ID))
        live = "document.querySelector('#live .live-turn')"
        page.wait_for(f"{live} && {live}.textContent === {json.dumps(FIRST_TRY[:12])}")
        writer.append([item("void", {"request": 1}, f"void:1:{writer.count}")])
        writer.append(deltas(1, ANSWER, 9))
        page.wait_for(f"{live}.textContent === {json.dumps(ANSWER)}")
        writer.append([message(1, [{"type": "text", "text": ANSWER}])])
        writer.append([item("result", {"status": "completed", "output": ANSWER}, "result")])
        page.wait_for(
            "document.querySelector('#live .live-state').textContent.includes('finished')"
        )
        assert page.evaluate(f"{live}.classList.contains('partial')") is False
        assert page.evaluate("document.querySelectorAll('#live .live-turn').length") == 1
        assert page.evaluate("document.querySelectorAll('#live b').length") == 0  # text only


@pytest.mark.crash
def test_the_page_ends_with_the_answer_when_the_worker_is_killed_mid_answer(
    tmp_path: Path,
) -> None:
    from tests.agent.openai_server import chat_server
    from tests.streams.chat import answer, call_reply, text_reply

    browser = require_chromium()
    db, log, port = tmp_path / "zincir.db", tmp_path / "server.log", free_port()
    worker_script = REPO / "tests" / "streams" / "stream_worker.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    final = "".join(answer())

    def worker(base_url: str, mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(worker_script), str(db), "killed", base_url, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    answer_text = "document.getElementById('answer').textContent"
    with (
        chat_server() as model,
        example_server(db, port, log),
        chromium_page(browser, tmp_path / "profile") as page,
    ):
        model.script(call_reply(), text_reply(answer(), stall_after=61))  # 60 words, stalls
        child = worker(model.base_url, "start")
        try:
            url = f"http://127.0.0.1:{port}/api/runs/killed/stream"
            deadline = time.monotonic() + 60
            while True:  # the page opens once the run exists
                with httpx.stream("GET", url, timeout=5) as response:
                    if response.status_code == 200:
                        break
                assert child.poll() is None, child.communicate()[1]
                assert time.monotonic() < deadline, "the run never started"
                time.sleep(0.05)
            page.open(f"http://127.0.0.1:{port}/?run=killed")
            partial = "".join(answer()[:60])
            page.wait_for(f"{answer_text} === {json.dumps(partial)}", timeout=60)
        finally:
            child.send_signal(signal.SIGKILL)  # the worker dies mid-answer
            child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        model.script(text_reply(answer()))
        again = worker(model.base_url, "resume")
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        page.wait_for("window.finished === true", timeout=60)
        received = page.evaluate("window.received")
        shown = page.evaluate(answer_text)
        kinds = page.evaluate("window.kinds")
    assert shown == final  # the voided partial is gone, nothing glued to the new answer
    assert received == list(range(1, len(received) + 1))  # each offset once, none missing
    assert kinds.count("void") == 1 and kinds[-1] == "result"
