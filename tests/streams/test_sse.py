"""`sse_app`: a run's durable stream as Server-Sent Events, over the real store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("starlette", reason='sse_app needs the "ui" extra')
pytest.importorskip("uvicorn", reason='sse_app needs the "ui" extra')

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.routing import Mount  # noqa: E402

import zincir  # noqa: E402
from tests.postgres_server import free_port  # noqa: E402
from zincir.store import NewStreamItem, Store  # noqa: E402
from zincir.streams import sse_app  # noqa: E402

LOOPBACK = ("127.0.0.1", 50000)
Event = dict[str, Any]


def parse(text: str) -> list[Event]:
    """The SSE messages of a body: events as {id, event, data}, comments as {comment}."""
    found: list[Event] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event: Event = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                found.append({"comment": line[1:].strip()})
                continue
            name, _, value = line.partition(": ")
            event[name] = value
        if "data" in event:
            event["data"] = json.loads(event["data"])
        if event:
            found.append(event)
    return found


def items_of(events: Sequence[Event]) -> list[tuple[int, str, Any]]:
    return [(int(e["id"]), e["event"], e["data"]) for e in events if "id" in e]


def item(kind: str, payload: dict[str, Any], key: str | None = None) -> NewStreamItem:
    return NewStreamItem(kind, json.dumps(payload), key)


TEXT = "Hello, world\nline two ✓"
ANSWER = [
    item("part_start", {"request": 1, "index": 0, "part_kind": "text"}),
    item("part_delta", {"request": 1, "index": 0, "delta": "Hello"}),
    item("part_delta", {"request": 1, "index": 0, "delta": ", wor"}),
    item("void", {"request": 1}, "void:1:3"),
    item("part_start", {"request": 1, "index": 0, "part_kind": "text"}),
    item("part_delta", {"request": 1, "index": 0, "delta": "Hello, "}),
    item("part_delta", {"request": 1, "index": 0, "delta": "world\nline two ✓"}),
    item("part_end", {"request": 1, "index": 0}),
    item(
        "message",
        {
            "request": 1,
            "response": {"parts": [{"type": "text", "text": "Hello, world\nline two ✓"}]},
        },
        "message:1",
    ),
]
RESULT = item("result", {"status": "completed", "output": TEXT}, "result")


async def started_run(store: Store, run_id: str = "run-1") -> zincir.AgentContext:
    return await zincir.AgentContext.create(store, "streamer", run_id=run_id)


async def finished_run(store: Store, run_id: str = "run-1") -> list[int]:
    ctx = await started_run(store, run_id)
    return await store.append_stream(ctx.lease, [*ANSWER, RESULT])


def client(app: Any, peer: tuple[str, int] = LOOPBACK) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=peer), base_url="http://127.0.0.1"
    )


# -- a finished run ------------------------------------------------------------------------


async def test_items_are_events_whose_id_is_the_offset(store: Store) -> None:
    offsets = await finished_run(store)
    async with client(sse_app(store)) as http:
        response = await http.get("/runs/run-1/stream")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    assert response.text.startswith("retry: ")
    got = items_of(parse(response.text))
    expected = [
        (offset, new.kind, json.loads(new.payload_json))
        for offset, new in zip(offsets, [*ANSWER, RESULT], strict=True)
    ]
    assert got == expected  # every item once, in order, ending with the result
    assert [o for o, _, _ in got] == list(range(1, len(ANSWER) + 2))
    assert "id: 7\nevent: part_delta\ndata: " in response.text
    assert '"world\\nline two ✓"' in response.text  # a newline never splits a data line


async def test_resume_from_every_offset_yields_the_same_suffix(store: Store) -> None:
    offsets = await finished_run(store)
    app = sse_app(store)
    async with client(app) as http:
        whole = items_of(parse((await http.get("/runs/run-1/stream")).text))
        for after in [0, *offsets[:-1]]:
            by_header = await http.get("/runs/run-1/stream", headers={"last-event-id": str(after)})
            by_query = await http.get(f"/runs/run-1/stream?after={after}")
            suffix = [entry for entry in whole if entry[0] > after]
            assert items_of(parse(by_header.text)) == suffix, after
            assert items_of(parse(by_query.text)) == suffix, after
        # the header (what a reconnecting browser sends) wins over the page's ?after=
        both = await http.get("/runs/run-1/stream?after=1", headers={"last-event-id": "6"})
        assert [o for o, _, _ in items_of(parse(both.text))] == offsets[6:]
        # past the result: 204, which tells an EventSource to stop reconnecting
        done = await http.get("/runs/run-1/stream", headers={"last-event-id": str(offsets[-1])})
        assert done.status_code == 204 and done.text == ""


@pytest.mark.parametrize("value", ["-1", "x", "1.5", "²", "9" * 19])
async def test_an_offset_that_is_not_a_number_is_400(store: Store, value: str) -> None:
    await finished_run(store)
    async with client(sse_app(store)) as http:
        by_header = await http.get("/runs/run-1/stream", headers={b"last-event-id": value.encode()})
        by_query = await http.get("/runs/run-1/stream", params={"after": value})
    for response in (by_header, by_query):
        assert response.status_code == 400
        assert response.json()["run_id"] == "run-1"


async def test_an_unknown_run_is_404_with_a_json_error(store: Store) -> None:
    async with client(sse_app(store)) as http:
        response = await http.get("/runs/nobody/stream")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["run_id"] == "nobody" and "nobody" in body["error"]


async def test_a_run_id_with_slashes_and_unicode(store: Store) -> None:
    await finished_run(store, "tenant/ä/run 7")
    async with client(sse_app(store)) as http:
        response = await http.get("/runs/tenant%2F%C3%A4%2Frun%207/stream")
    assert response.status_code == 200
    assert items_of(parse(response.text))[-1][1] == "result"


# -- who may read --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "status"),
    [
        (("127.0.0.1", 1), 200),
        (("127.9.8.7", 1), 200),
        (("::1", 1), 200),
        (("::ffff:127.0.0.1", 1), 200),
        (("192.0.2.7", 1), 403),
        (("10.0.0.1", 1), 403),
        (("2001:db8::1", 1), 403),
        (("testclient", 1), 403),
    ],
)
async def test_only_loopback_clients_by_default(
    store: Store, peer: tuple[str, int], status: int
) -> None:
    await finished_run(store)
    async with client(sse_app(store), peer) as http:
        response = await http.get("/runs/run-1/stream")
    assert response.status_code == status
    if status == 403:
        assert "authorize" in response.json()["error"]
        assert "result" not in response.text


async def test_the_authorize_hook_decides_sync_or_async(store: Store) -> None:
    await finished_run(store)
    seen: list[str] = []

    def by_token(request: Request) -> bool:
        seen.append(request.path_params["run_id"])
        return request.headers.get("authorization") == "Bearer s3cret"

    async def nobody(request: Request) -> bool:
        await asyncio.sleep(0)
        return False

    remote = ("192.0.2.7", 443)
    async with client(sse_app(store, authorize=by_token), remote) as http:
        allowed = await http.get("/runs/run-1/stream", headers={"authorization": "Bearer s3cret"})
        refused = await http.get("/runs/run-1/stream", headers={"authorization": "Bearer nope"})
    assert allowed.status_code == 200 and items_of(parse(allowed.text))[-1][1] == "result"
    assert refused.status_code == 403
    assert seen == ["run-1", "run-1"]
    async with client(sse_app(store, authorize=nobody)) as http:  # even loopback
        assert (await http.get("/runs/run-1/stream")).status_code == 403
    async with client(sse_app(store, authorize=nobody)) as http:  # refused before the lookup
        assert (await http.get("/runs/nobody/stream")).status_code == 403


async def test_mounted_in_a_users_app(store: Store) -> None:
    await finished_run(store)
    app = Starlette(routes=[Mount("/zincir", app=sse_app(store))])
    async with client(app) as http:
        response = await http.get("/zincir/runs/run-1/stream", headers={"last-event-id": "8"})
    assert [kind for _, kind, _ in items_of(parse(response.text))] == ["message", "result"]


# -- a live run over a real server -----------------------------------------------------------


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """uvicorn serving ``app`` on a free loopback port, in this event loop."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none")
    config.lifespan = "off"
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_a_live_run_is_followed_with_keep_alives_until_its_result(store: Store) -> None:
    ctx = await started_run(store)
    await store.append_stream(ctx.lease, ANSWER[:2])
    received: list[Event] = []

    async def follow(base: str) -> None:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as http,
            http.stream("GET", "/runs/run-1/stream") as response,
        ):
            assert response.status_code == 200
            buffer = ""
            async for chunk in response.aiter_text():
                buffer += chunk
                *blocks, buffer = buffer.split("\n\n")
                received.extend(parse("\n\n".join(blocks) + "\n\n"))

    async with served(sse_app(store, keep_alive=0.1)) as base:
        reader = asyncio.create_task(follow(base))
        async with asyncio.timeout(20):
            while len(items_of(received)) < 2:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # nothing is written: the connection carries comments
            assert {"comment": "keep-alive"} in received[2:]
            await store.append_stream(ctx.lease, ANSWER[2:])
            await store.append_stream(ctx.lease, [RESULT])
            await reader  # the response ends after the result item
    got = items_of(received)
    assert [o for o, _, _ in got] == list(range(1, len(ANSWER) + 2))
    assert got[-1][1] == "result"


async def test_a_client_that_leaves_ends_its_reader(store: Store) -> None:
    ctx = await started_run(store)
    await store.append_stream(ctx.lease, ANSWER[:1])
    async with served(sse_app(store, keep_alive=0.1)) as base:
        for _ in range(3):
            async with (
                httpx.AsyncClient(base_url=base, timeout=10) as http,
                http.stream("GET", "/runs/run-1/stream") as response,
            ):
                async for chunk in response.aiter_text():
                    if "id: 1" in chunk:
                        break
        await asyncio.sleep(0.3)
        # the server stops at once: no response is left following the run
    await store.append_stream(ctx.lease, [RESULT])
