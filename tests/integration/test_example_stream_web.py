"""examples/stream_web as its docstrings tell a user to run it: agent.py streams a run on
OpenAIChatModel (the scripted server), is SIGKILLed mid-answer and run again with the run's
id; server.py serves the run's stream, which a client folds into exactly the final answer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import zincir
from tests.agent.openai_server import API_KEY, Reply, call_delta, chat_server, chunk, usage
from tests.conftest import REPO
from tests.streams.chat import answer, fold, text_reply
from zincir.streams import read

EXAMPLE = REPO / "examples" / "stream_web"

pytest.importorskip("uvicorn")


def _call_reply() -> Reply:
    return Reply(
        chunks=[
            chunk({"role": "assistant"}),
            chunk(call_delta(0, '{"city": "Oslo"}', "call-1", "get_weather")),
            chunk(finish_reason="tool_calls"),
            chunk(usage_=usage(10, 4)),
        ]
    )


async def _deltas(db: Path) -> int:
    store = zincir.open_store(db)
    try:
        runs = await store.list_runs()
        rows = await store.read_stream(runs[0]["id"], 0, limit=10_000) if runs else []
        deltas = (json.loads(row.payload_json) for row in rows if row.kind == "part_delta")
        return len("".join(d["delta"] for d in deltas if d["request"] == 1).split())
    finally:
        await store.close()


async def _run_id(db: Path) -> str:
    store = zincir.open_store(db)
    try:
        return str((await store.list_runs())[0]["id"])
    finally:
        await store.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_page_server_serves_a_stream_cut_by_a_crash_as_the_final_answer(
    tmp_path: Path,
) -> None:
    db = tmp_path / "zincir.db"
    pieces = answer(120)
    with chat_server() as server:
        server.script(_call_reply(), text_reply(pieces, stall_after=40))
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "src"),
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": API_KEY,
        }
        first = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "agent.py"), str(db)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert first.stdout is not None
        announced = first.stdout.readline()  # the page's address comes before the answer
        deadline = time.monotonic() + 60
        while not db.exists() or await _deltas(db) < 30:
            assert time.monotonic() < deadline, "the answer never started streaming"
            await asyncio.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait()
        first.stdout.close()
        run_id = await _run_id(db)
        assert f"?run={run_id}" in announced

        server.script(text_reply(pieces))
        again = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(EXAMPLE / "agent.py"), str(db), run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"{run_id} {''.join(pieces)}".strip()

    port = _free_port()
    page_server = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "server.py"), str(db), str(port)],
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                page = httpx.get(base + "/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server.py never answered"
                time.sleep(0.1)
        assert page.status_code == 200 and "EventSource" in page.text
        body = httpx.get(f"{base}/api/runs/{run_id}/stream", timeout=30).text
    finally:
        page_server.terminate()
        page_server.wait(timeout=30)

    events = [block for block in body.split("\n\n") if block.startswith(("id:", "retry:"))]
    kinds = [
        line.split(": ", 1)[1]
        for block in events
        for line in block.splitlines()
        if line.startswith("event:")
    ]
    assert kinds.count("void") == 1 and kinds[-1] == "result"

    store = zincir.open_store(db)
    try:
        items = [item async for item in read(store, run_id)]
    finally:
        await store.close()
    folded = fold(items)
    assert folded.voided and folded.voided[0].startswith("".join(pieces[:30]))
    assert folded.result is not None and folded.result["status"] == "completed"
    last = json.dumps([part.model_dump(mode="json") for part in folded.messages[-1].parts])
    assert "".join(pieces) in last
