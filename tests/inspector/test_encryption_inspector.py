"""The inspector of an encrypted store: with its keys (``create_app(encryption=)``, ``zincir
ui --key-file``) every page and JSON API shows the payloads decrypted; without them a banner
says payloads are sealed, each reads ``‹sealed›`` and the structure shows; no key ever
reaches a page or a response."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import zincir
from tests.agent.openai_server import ChatServer
from tests.inspector.conftest import ADDRESS, BASE_URL
from tests.integration.test_encryption_canary import (
    AGENT_RUN,
    CANARY,
    RECEIVER_RUN,
    WORKFLOW_RUN,
    put_the_canary_everywhere,
)
from tests.postgres_server import free_port
from zincir._encryption import KEYS_ENV, SEALED
from zincir.inspector import create_app
from zincir.store import NewStreamItem

KEY_ID = "ui-key"
REPO = Path(__file__).resolve().parents[2]
MODEL_REQUEST = "step_id=model.request&sequence=0"
PAGES = (
    "/",
    f"/runs/{AGENT_RUN}",
    f"/conversation/{AGENT_RUN}",
    f"/operation/{AGENT_RUN}?{MODEL_REQUEST}",
    f"/runs/{WORKFLOW_RUN}",
    f"/runs/{RECEIVER_RUN}",
)
APIS = (
    "/api/runs",
    f"/api/runs/{AGENT_RUN}",
    f"/api/conversation/{AGENT_RUN}",
    f"/api/event/{AGENT_RUN}?seq=3",
    f"/api/operation/{AGENT_RUN}?{MODEL_REQUEST}",
    f"/api/runs/{WORKFLOW_RUN}",
    f"/api/runs/{RECEIVER_RUN}",
)


@pytest.fixture
def keys() -> zincir.Encryption:
    return zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)


def key_texts(keys: zincir.Encryption) -> list[str]:
    key = keys.key(KEY_ID)
    assert key is not None
    return [base64.b64encode(key).decode(), key.hex()]


async def sealed_store(target: str, server: ChatServer, keys: zincir.Encryption) -> None:
    store = zincir.open_store(target, encryption=keys)
    try:
        await put_the_canary_everywhere(store, server)
    finally:
        await store.close()


def client(target: str, keys: zincir.Encryption | None) -> TestClient:
    return TestClient(create_app(target, address=ADDRESS, encryption=keys), base_url=BASE_URL)


def fetch_all(http: TestClient) -> dict[str, httpx.Response]:
    found = {path: http.get(path) for path in (*PAGES, *APIS)}
    for path, response in found.items():
        assert response.status_code == 200, (path, response.text[:500])
    return found


async def test_the_apis_and_pages_show_payloads_with_the_keys_and_sealed_without(
    store_target: str, server: ChatServer, keys: zincir.Encryption
) -> None:
    await sealed_store(store_target, server, keys)
    secrets = key_texts(keys)

    opened = fetch_all(client(store_target, keys))
    for path in APIS[1:]:
        assert CANARY in opened[path].text, path
    for path in PAGES[1:]:
        assert CANARY in opened[path].text, path
    for response in opened.values():
        assert SEALED not in response.text
        assert not any(secret in response.text for secret in secrets)
    detail = opened[f"/api/runs/{AGENT_RUN}"].json()
    assert detail["sealed"] is False
    assert detail["usage"]["output_tokens"] > 0  # summed from the opened payloads
    assert opened[f"/api/event/{AGENT_RUN}?seq=3"].json()["value"]["tool_calls"][0][
        "arguments"
    ] == {"query": CANARY}
    [step] = opened[f"/api/runs/{WORKFLOW_RUN}"].json()["steps"]
    assert step["result"] == {"v": CANARY}

    blind = fetch_all(client(store_target, None))
    for path, response in blind.items():
        assert CANARY not in response.text, path
        assert not any(secret in response.text for secret in secrets)
    for path in PAGES:
        assert "payloads sealed" in blind[path].text, path
        assert "zincir ui --key-file PATH" in blind[path].text
    runs = blind["/api/runs"].json()
    assert runs["sealed"] is True
    assert {run["id"]: run["status"] for run in runs["runs"]}[AGENT_RUN] == "completed"
    detail = blind[f"/api/runs/{AGENT_RUN}"].json()
    assert detail["sealed"] is True
    assert detail["config"] == SEALED and detail["run"]["result"] == SEALED
    assert detail["usage"] == {}
    assert [event["seq"] for event in detail["events"]] == list(range(1, 18))
    assert {event["payload"] for event in detail["events"]} == {SEALED}
    assert {event["type"] for event in detail["events"]} >= {"llm_call", "tool_result"}
    assert [op["kind"] for op in detail["operations"]][:1] == ["model_request"]
    chat = blind[f"/api/conversation/{AGENT_RUN}"].json()
    assert chat["sealed"] is True
    turns: list[dict[str, Any]] = chat["conversation"]["entries"]
    assert [entry["content"] for entry in turns if entry["kind"] == "response"] == [SEALED] * 3
    assert {entry["result"] for entry in turns if entry["kind"] == "tool_result"} == {SEALED}
    assert chat["conversation"]["prompt"]["messages"] == [{"role": "user", "text": SEALED}]
    assert blind[f"/api/event/{AGENT_RUN}?seq=3"].json()["value"] == SEALED
    operation = blind[f"/api/operation/{AGENT_RUN}?{MODEL_REQUEST}"].json()
    assert (operation["input"], operation["record"]) == (SEALED, SEALED)
    assert operation["input_digest"]  # digests stay clear
    [step] = blind[f"/api/runs/{WORKFLOW_RUN}"].json()["steps"]
    assert (step["name"], step["status"], step["result"]) == ("canary-step", "completed", SEALED)
    [message] = blind[f"/api/runs/{RECEIVER_RUN}"].json()["messages"]
    assert (message["topic"], message["payload"]) == ("canary-topic", SEALED)
    assert SEALED in blind[f"/conversation/{AGENT_RUN}"].text


async def test_a_wrong_key_is_refused_and_a_missing_key_id_is_a_readable_page(
    store_target: str, server: ChatServer, keys: zincir.Encryption
) -> None:
    await sealed_store(store_target, server, keys)
    wrong = zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)
    with pytest.raises(zincir.PayloadTampered, match=f"the key given as {KEY_ID!r} is not"):
        create_app(store_target, address=ADDRESS, encryption=wrong)
    other = zincir.Encryption({"other": zincir.Encryption.generate_key()}, "other")
    http = client(store_target, other)
    response = http.get(f"/api/runs/{AGENT_RUN}")
    assert response.status_code == 403
    assert f"sealed with key {KEY_ID!r}, which was not given" in response.json()["message"]
    page = http.get(f"/runs/{AGENT_RUN}")
    assert page.status_code == 403 and "A key of this database was not given" in page.text
    for secret in (*key_texts(keys), *key_texts(wrong)):
        assert secret not in response.text and secret not in page.text


@contextmanager
def zincir_ui(db: str, log: Path, *args: str) -> Iterator[str]:
    """``python -m zincir ui --db DB ARGS`` on a free loopback port; its base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ZINCIR_UI_ADDRESS": f"127.0.0.1:{port}"}
    env.pop(KEYS_ENV, None)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "zincir", "ui", "--db", db, *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"zincir ui did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield base
    finally:
        process.kill()
        process.wait()


async def test_zincir_ui_serves_decrypted_with_the_key_file_and_sealed_without(
    tmp_path: Path, server: ChatServer, keys: zincir.Encryption
) -> None:
    db = str(tmp_path / "sealed.db")
    await sealed_store(db, server, keys)
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys.to_json())
    secrets = key_texts(keys)

    with zincir_ui(db, tmp_path / "keyed.log", "--key-file", str(key_file)) as base:
        answer = httpx.get(f"{base}/api/runs/{AGENT_RUN}", timeout=10)
        page = httpx.get(f"{base}/conversation/{AGENT_RUN}", timeout=10)
    assert answer.json()["sealed"] is False and CANARY in answer.text
    assert CANARY in page.text and "payloads sealed" not in page.text
    with zincir_ui(db, tmp_path / "blind.log") as base:
        answer = httpx.get(f"{base}/api/runs/{AGENT_RUN}", timeout=10)
        page = httpx.get(f"{base}/conversation/{AGENT_RUN}", timeout=10)
    assert answer.json()["sealed"] is True and CANARY not in answer.text
    assert "payloads sealed" in page.text and SEALED in page.text
    logs = (tmp_path / "keyed.log").read_text() + (tmp_path / "blind.log").read_text()
    assert "payloads show as sealed (give --key-file to read them)" in logs
    assert not any(secret in logs + answer.text + page.text for secret in secrets)


async def loopback_get(target: str, keys: zincir.Encryption | None, path: str) -> httpx.Response:
    """GET ``path`` as a loopback client (the stream answers no other)."""
    app = create_app(target, address=ADDRESS, encryption=keys)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        return await http.get(path)


def sse_items(text: str) -> list[tuple[int, str, Any]]:
    """(offset, kind, data) of the events of a Server-Sent Events body."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.partition(": ")[::2] for line in block.split("\n") if ": " in line)
        if "id" in fields:
            found.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return found


async def test_a_live_runs_stream_is_served_opened_with_the_keys_and_sealed_without(
    store_target: str, keys: zincir.Encryption
) -> None:
    store = zincir.open_store(store_target, encryption=keys)
    try:
        ctx = await zincir.AgentContext.create(store, "streamer", run_id="live-1")
        items = [
            NewStreamItem("part_delta", json.dumps({"request": 1, "index": 0, "delta": CANARY})),
            NewStreamItem("result", json.dumps({"status": "completed", "output": CANARY}), "r"),
        ]
        offsets = await store.append_stream(ctx.lease, items)
    finally:
        await store.close()

    opened = client(store_target, keys)
    assert opened.get("/api/runs/live-1").json()["live_stream"] == offsets[-1]
    streamed = sse_items((await loopback_get(store_target, keys, "/api/stream/live-1")).text)
    assert [(offset, kind) for offset, kind, _ in streamed] == [
        (offsets[0], "part_delta"),
        (offsets[1], "result"),
    ]
    assert streamed[0][2]["delta"] == CANARY

    blind = client(store_target, None)
    assert blind.get("/api/runs/live-1").json()["live_stream"] is None  # not followed
    response = await loopback_get(store_target, None, "/api/stream/live-1")
    assert response.status_code == 200
    sealed = sse_items(response.text)
    assert [(offset, kind) for offset, kind, _ in sealed] == [
        (offsets[0], "part_delta"),
        (offsets[1], "result"),
    ]
    assert {json.dumps(data) for _, _, data in sealed} == {json.dumps({"sealed": SEALED})}
    assert CANARY not in response.text
