"""Long runs through the writers outside the agent loop, at linear cost: ``LocalRuntime`` used
on its own with a growing request, and the restart checkpoint of a stream. Each run's bytes
added per turn late are within 1.1x of early on, and its rows hold descriptions of their
inputs, not the inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import select
from tests.store.growth import Growth, stored_bytes
from zincir import HandlerRegistry, InvalidInvocation, Invocation, LocalRuntime, OperationKind
from zincir.contract import decode_record
from zincir.restart import CheckpointedStreamSink, FileRestartStore, SQLRestartStore
from zincir.store import OperationKey, Store

TURNS = 200
SECTION = "lorem ipsum dolor sit amet " * 74  # about 2 KB of new text a turn
TOOLS = [
    {"name": f"tool_{n}", "description": "Reads one section. " * 20, "parameters": {}}
    for n in range(3)
]


def message(turn: int) -> dict[str, Any]:
    return {"role": "user", "parts": [{"kind": "text", "text": f"section {turn}: {SECTION}"}]}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def model_request(messages: list[dict[str, Any]]) -> str:
    """A model request's input: the conversation in a top-level ``messages`` array."""
    return compact({"model": "test", "messages": messages, "tools": TOOLS})


def top_level_array(messages: list[dict[str, Any]]) -> str:
    return compact(messages)


def nested_messages(messages: list[dict[str, Any]]) -> str:
    """The conversation under another key, as a tool's arguments hold it."""
    return compact({"tool": "summarise", "args": {"history": {"messages": messages}}})


def answer(invocation: Invocation, request: Any) -> dict[str, Any]:
    return {"text": f"read {invocation.sequence}"}


def refuse(invocation: Invocation, request: Any) -> dict[str, Any]:
    raise AssertionError(f"a replay ran {invocation.stable_key()}")


async def grow(
    store: Store, target: str, shape: Callable[[list[dict[str, Any]]], str], turns: int = TURNS
) -> tuple[Growth, list[Invocation]]:
    """A ``LocalRuntime`` of its own (no run, no lease) executing one request a turn, each
    input the previous one and a new 2 KB message."""
    runtime = LocalRuntime(store, HandlerRegistry(), max_input_bytes=None)
    growth = Growth(target)
    messages: list[dict[str, Any]] = []
    invocations = []
    for turn in range(turns):
        messages.append(message(turn))
        invocation = Invocation(
            "long", "model.request", turn, OperationKind.MODEL_REQUEST, "model", shape(messages)
        )
        await runtime.execute(invocation, inline=answer)
        invocations.append(invocation)
        growth.sample()
    return growth, invocations


async def test_local_runtime_alone_stores_a_growing_request_at_linear_cost(
    store: Store, store_url: str
) -> None:
    growth, invocations = await grow(store, store_url, model_request)
    early, late = growth.assert_linear()
    assert late < 6_000  # 2 KB of new text, its piece and node, the row and its record
    stored = select(
        store_url,
        "SELECT sequence, input_json, input_parts, record FROM operations "
        "WHERE run_id = 'long' ORDER BY sequence",
    )
    assert len(stored) == TURNS
    for _, text, parts, record in stored:
        assert text == "" and parts is not None and len(parts) < 1_000
        assert len(record) < 1_000
    # Whole on read, digest checked; a new runtime replays the last request calling nothing.
    last = invocations[-1]
    row = await store.get_operation(OperationKey("long", last.step_id, last.sequence))
    assert row is not None and row.record is not None
    assert decode_record(row.record).invocation.input_json == last.input_json
    replayed = await LocalRuntime(store, HandlerRegistry(), max_input_bytes=None).execute(
        last, inline=refuse
    )
    assert replayed.invocation == last


async def test_local_runtime_alone_takes_a_request_past_one_mib(
    store: Store, store_url: str
) -> None:
    """By default a LocalRuntime allows an input up to the largest document zincir stores
    (16 MiB), not the 1 MiB of a bare invocation: a long conversation is stored once."""
    runtime = LocalRuntime(store, HandlerRegistry())
    text = model_request([message(turn) for turn in range(600)])
    assert len(text) > 1024 * 1024
    long = Invocation("past", "model.request", 0, OperationKind.MODEL_REQUEST, "model", text)
    assert (await runtime.execute(long, inline=answer)).invocation == long
    ((parts,),) = select(store_url, "SELECT input_parts FROM operations WHERE run_id = 'past'")
    assert parts is not None and len(parts) < 1_000
    huge = compact({"messages": ["x" * (16 * 1024 * 1024)]})
    too_large = Invocation("past", "model.request", 1, OperationKind.MODEL_REQUEST, "model", huge)
    with pytest.raises(InvalidInvocation, match="max_input_bytes"):
        await runtime.execute(too_large, inline=answer)


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    "shape", [top_level_array, nested_messages], ids=["top-level array", "nested messages"]
)
async def test_local_runtime_alone_stores_other_growing_shapes_at_linear_cost(
    store: Store, store_url: str, shape: Callable[[list[dict[str, Any]]], str]
) -> None:
    growth, _ = await grow(store, store_url, shape, turns=120)
    growth.assert_linear()


# -- restart checkpoints of a stream ------------------------------------------------------


class Event:
    """A stream event as a sink sees it (the sink only counts ordinals)."""

    def __init__(self, text: str) -> None:
        self.text = text


async def test_a_streams_restart_checkpoint_does_not_grow_with_the_stream(
    store: Store, store_url: str
) -> None:
    """The checkpoint of a stream segment is its count of delivered events, one row
    rewritten in place: after the first event the store holds no more bytes, however long
    the stream runs; a restarted sink skips what was delivered."""
    delivered: list[str] = []
    sink = CheckpointedStreamSink(SQLRestartStore(store), "stream-run", "events", _into(delivered))
    growth = Growth(store_url)
    for ordinal in range(300):
        await sink(Event(f"event {ordinal}: {SECTION}"))
        growth.sample()
    assert len(delivered) == 300
    # {"delivered": n} rewritten in place: only the count's digits change (at 10 and 100).
    assert growth.stored[-1] - growth.stored[0] == 2
    assert growth.stored[-1] == growth.stored[100] == stored_bytes(store_url) < 200
    if growth.files:
        assert growth.files[-1] == growth.files[20]
    (payload,) = select(store_url, "SELECT payload FROM restart_checkpoints")[0]
    assert json.loads(payload) == {"delivered": 300}
    again: list[str] = []
    restarted = CheckpointedStreamSink(SQLRestartStore(store), "stream-run", "events", _into(again))
    for ordinal in range(301):
        await restarted(Event(f"event {ordinal}"))
    assert again == ["event 300"]


async def test_a_streams_file_checkpoint_does_not_grow_with_the_stream(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    sink = CheckpointedStreamSink(FileRestartStore(folder), "stream-run", "events", _into([]))
    sizes = []
    for ordinal in range(300):
        await sink(Event(f"event {ordinal}: {SECTION}"))
        sizes.append(sum(path.stat().st_size for path in folder.glob("*.ckpt")))
    assert len(list(folder.glob("*.ckpt"))) == 1
    assert sizes[-1] == sizes[100] == sizes[0] + 4  # the digits of revision and count
    assert max(sizes) < 400


def _into(delivered: list[str]) -> Callable[[Any], None]:
    def sink(event: Any) -> None:
        delivered.append(event.text.split(":")[0])

    return sink
