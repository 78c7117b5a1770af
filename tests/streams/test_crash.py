"""A worker SIGKILLed mid-answer: its partial answer is voided, never silently dropped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import zincir
from tests.agent.openai_server import ChatServer, chat_server
from tests.streams.chat import after_prompt, answer, call_reply, fold, load, text_reply
from zincir.streams import read

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("stream_worker.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}


@pytest.fixture(scope="module")
def server() -> Iterator[ChatServer]:
    with chat_server() as running:
        yield running


def worker(target: str, server: ChatServer, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), target, "killed", server.base_url, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


@pytest.mark.crash
async def test_a_worker_killed_mid_answer_resumes_with_its_partial_voided(
    store_target: str, server: ChatServer
) -> None:
    server.reset()
    server.script(call_reply(), text_reply(answer(), stall_after=61))  # 60 words, then stalls
    store = zincir.open_store(store_target)
    try:
        child = worker(store_target, server, "start")
        try:
            deadline = time.monotonic() + 60
            while True:  # until the answer's first 60 words are in the stream
                rows = (
                    await store.read_stream("killed", 0, 10_000)
                    if await store.get_run("killed")
                    else []
                )
                words = "".join(
                    json.loads(r.payload_json)["delta"]
                    for r in rows
                    if r.kind == "part_delta" and '"request":1' in r.payload_json
                ).split()
                if len(words) >= 60:
                    break
                assert child.poll() is None, child.communicate()[1]
                assert time.monotonic() < deadline, "the answer never reached the stream"
                time.sleep(0.02)
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL

        server.script(text_reply(answer()))
        again = worker(store_target, server, "resume")
        out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        messages = load(out)

        items = [item async for item in read(store, "killed")]
        kinds = [item.kind for item in items]
        void = kinds.index("void")
        assert items[void].payload == {"request": 1}
        assert kinds.count("void") == 1 and kinds.count("message") == 2
        assert kinds[void - 1] in ("part_delta", "part_start")  # the dead attempt's partial
        assert kinds[void + 1] == "part_start" and kinds[-2:] == ["message", "result"]
        folded = fold(items)
        assert folded.voided == ["".join(answer()[:60])]
        assert folded.messages == after_prompt(messages) and not folded.partial
        assert folded.result == {"status": "completed", "output": "".join(answer())}
        assert [item.offset for item in items] == list(range(1, len(items) + 1))
    finally:
        await store.close()
