"""Encryption at rest of the workflow families, on every backend: messages (and the take of
an approval's wake-ups by payload field), approvals with edited arguments, restart
checkpoints, stream items (and their compaction) and LangGraph checkpoints, metadata and
writes. The APIs return plaintext; the columns, read raw, hold only sealed values."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import apsw
import pytest

import zincir
from tests.helpers import is_postgres, select
from zincir import PayloadTampered, RevisionConflict
from zincir._encryption import SEALED
from zincir.restart import SQLRestartStore
from zincir.store import (
    GraphWrite,
    Lease,
    NewApproval,
    NewGraphCheckpoint,
    NewStreamItem,
    Store,
)
from zincir.store._readonly import open_read_only
from zincir.store._restart_records import APPROVAL_TOPIC, decision_taker

pytest.importorskip("cryptography", reason="encryption at rest needs the crypto extra")

TTL = timedelta(seconds=30)
CANARY = "canary-7f3a9c-do-not-store"
KEYS = zincir.Encryption({"wf-1": bytes(range(32))}, "wf-1")


def sealed(value: object) -> bool:
    """Whether a raw column value is a sealed envelope in its stored form, without the
    canary in clear."""
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, str):
        return value.startswith("zs1:") and CANARY not in value
    return isinstance(value, bytes) and value.startswith(b"zs1") and CANARY.encode() not in value


def raw(target: str, query: str) -> list[Any]:
    """Every value of a one-column SELECT, read past zincir (no key)."""
    return [row[0] for row in select(target, query)]


def digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An encrypted store (keys given explicitly: $ZINCIR_ENCRYPTION_KEYS plays no part)."""
    opened = zincir.open_store(store_url, encryption=KEYS)
    yield opened
    await opened.close()


@pytest.fixture
async def lease(store: Store) -> Lease:
    return await store.create_run("r1", name="workflow", owner="me", ttl=TTL)


async def test_messages_are_sealed_and_received_in_clear(
    store: Store, store_url: str, lease: Lease
) -> None:
    await store.send_message("r1", "inbox", json.dumps({"text": CANARY, "n": 1}), key="k1")
    await store.send_from_run(
        lease, "r1", "inbox", json.dumps({"text": CANARY, "n": 2}), send_key="s1"
    )
    first = await store.receive_attempt(lease, "inbox", "recv-1", None)
    second = await store.receive_attempt(lease, "inbox", "recv-2", None)
    assert (
        first.done and first.value is not None and first.value.payload == {"text": CANARY, "n": 1}
    )
    assert second.value is not None and second.value.payload == {"text": CANARY, "n": 2}
    replayed = await store.replayed_receive("r1", "recv-1")
    assert replayed is not None and replayed.value == first.value
    assert not (await store.receive_attempt(lease, "inbox", "recv-3", None)).done
    stored = raw(store_url, "SELECT payload FROM messages")
    assert len(stored) == 2 and all(sealed(value) for value in stored)


async def test_approvals_are_sealed_and_a_settled_call_takes_only_its_own_wake_up(
    store: Store, store_url: str, lease: Lease
) -> None:
    calls = []
    for call_id in ("c1", "c2"):
        arguments = {"order_id": "A-17", "note": CANARY, "call": call_id}
        calls.append(
            NewApproval(
                "r1", call_id, "refund", json.dumps(arguments), digest(arguments), 7, "approval"
            )
        )
    opened = await store.open_approvals(lease, calls)
    assert [json.loads(row.arguments_json)["note"] for row in opened] == [CANARY, CANARY]
    edited = {"order_id": "A-18", "note": CANARY}
    decision = json.dumps({"decision": "approve", "arguments": edited, "reason": CANARY})
    decided = await store.decide_approval(
        "r1/c1", decision, edited_args_sha256=digest(edited), decided_by="ops@example"
    )
    assert decided.decision_json == decision and decided.decided_by == "ops@example"
    await store.decide_approval("r1/c2", json.dumps({"decision": "deny", "reason": CANARY}))
    got = await store.get_approval("r1/c1")
    assert got is not None and got.decision_json == decision
    assert got.edited_args_sha256 == digest(edited) and got.args_sha256 == calls[0].args_sha256
    listed = await store.list_approvals("r1", pending=False)
    assert [json.loads(row.arguments_json)["call"] for row in listed] == ["c1", "c2"]
    assert [row.approval_id for row in await store.list_approvals(pending=False)] == [
        "r1/c1",
        "r1/c2",
    ]

    # The run applies c1's decision: of the two wake-ups (sealed), only c1's is taken.
    await store.settle_approval(lease, "c1", decision)
    taken = select(
        store_url,
        "SELECT received_by FROM messages WHERE topic = ? ORDER BY id",
        (APPROVAL_TOPIC,),
    )
    assert taken == [(decision_taker("c1", 7),), (None,)]
    woken = await store.receive_attempt(lease, APPROVAL_TOPIC, "wake-1", None)
    assert woken.value is not None and woken.value.payload["call_id"] == "c2"

    for column in ("arguments", "decision"):
        stored = raw(store_url, f"SELECT {column} FROM approvals")
        assert len(stored) == 2 and all(sealed(value) for value in stored)
    assert raw(store_url, "SELECT args_sha256 FROM approvals ORDER BY call_id") == [
        call.args_sha256 for call in calls
    ]  # digests stay clear
    assert all(sealed(value) for value in raw(store_url, "SELECT payload FROM messages"))


async def test_restart_checkpoints_are_sealed_and_revised_on_opened_payloads(
    store: Store, store_url: str, lease: Lease
) -> None:
    restart = SQLRestartStore(store)
    first = {"offset": 3, "text": CANARY}
    assert (await restart.save("r1", "cp", 1, first)).payload == first
    again = await restart.save("r1", "cp", 1, {"text": CANARY, "offset": 3})  # key order
    assert again.revision == 1 and again.payload == first
    with pytest.raises(RevisionConflict, match="diverges"):
        await restart.save("r1", "cp", 1, {"offset": 4, "text": CANARY})
    await restart.save("r1", "cp", 2, {"offset": 9, "text": CANARY})
    with pytest.raises(RevisionConflict, match="older"):
        await restart.save("r1", "cp", 1, first)
    loaded = await restart.load("r1", "cp")
    assert loaded is not None and (loaded.revision, loaded.payload) == (
        2,
        {"offset": 9, "text": CANARY},
    )
    await restart.save("r1", "other", 0, [CANARY])
    assert [(c.checkpoint_id, c.payload) for c in await restart.list("r1")] == [
        ("cp", {"offset": 9, "text": CANARY}),
        ("other", [CANARY]),
    ]
    stored = raw(store_url, "SELECT payload FROM restart_checkpoints")
    assert len(stored) == 2 and all(sealed(value) for value in stored)


def _item(kind: str, key: str | None = None, **payload: object) -> NewStreamItem:
    return NewStreamItem(kind, json.dumps({"text": CANARY, **payload}), key)


async def test_stream_items_are_sealed_read_in_clear_and_compacted(
    store: Store, store_url: str, lease: Lease
) -> None:
    r1 = [
        _item("part_start", request=1),
        _item("part_delta", request=1),
        _item("void", "v:1", request=1),
    ]
    r1 += [_item("message", "message:1", request=1)]
    r2 = [_item("part_start", request="b"), _item("part_delta", request="b")]
    r2 += [_item("message", "message:b", request="b"), _item("part_delta", request=3)]
    assert await store.append_stream(lease, r1 + r2) == list(range(1, 9))
    assert await store.append_stream(lease, [_item("void", "v:1", request=1)]) == []  # keyed: once
    rows = await store.read_stream("r1", 0)
    assert [json.loads(row.payload_json) for row in rows] == [
        json.loads(item.payload_json) for item in r1 + r2
    ]
    tail = await store.stream_tail("r1")
    assert tail is not None and tail.offset == 8 and CANARY in tail.payload_json
    assert (await store.compact_run("r1", max_events=2)).stream_deltas == 5
    assert [row.offset for row in await store.read_stream("r1", 0)] == [4, 7, 8]
    stored = raw(store_url, "SELECT payload FROM stream_items")
    assert len(stored) == 3 and all(sealed(value) for value in stored)


def _checkpoint(**values: Any) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    made = empty_checkpoint()
    made["id"] = str(uuid6(clock_seq=-1))
    made["channel_values"] = values
    made["channel_versions"] = dict.fromkeys(values, 1)
    return made


def test_langgraph_checkpoints_metadata_and_writes_are_sealed(store_target: str) -> None:
    pytest.importorskip("langgraph", reason="LangGraph is in the dev extra")
    from zincir.integrations.langgraph import ZincirSaver

    def cfg(checkpoint_id: str | None = None) -> Any:
        inner = {"thread_id": "t", "checkpoint_ns": ""}
        return {
            "configurable": inner
            if checkpoint_id is None
            else {**inner, "checkpoint_id": checkpoint_id}
        }

    with ZincirSaver.from_conn_string(store_target, encryption=KEYS) as saver:
        ids: list[str] = []
        for step in range(6):
            made = _checkpoint(text=f"{CANARY}-{step}")
            meta = {
                "source": "loop",
                "step": step,
                "parents": {},
                "who": CANARY,
                "even": step % 2 == 0,
            }
            saver.put(cfg(ids[-1] if ids else None), made, meta, {})  # type: ignore[arg-type]
            ids.append(made["id"])
        saver.put_writes(cfg(ids[-1]), [("text", CANARY), ("n", 1)], "task-1")
        got = saver.get_tuple(cfg())
        assert got is not None and got.checkpoint["channel_values"] == {"text": f"{CANARY}-5"}
        assert got.metadata["who"] == CANARY
        assert [(channel, value) for _, channel, value in got.pending_writes or []] == [
            ("text", CANARY),
            ("n", 1),
        ]

        def steps(**kwargs: Any) -> list[int]:
            return [t.metadata["step"] for t in saver.list(cfg(), **kwargs)]

        assert steps() == [5, 4, 3, 2, 1, 0]
        assert steps(filter={"even": True}) == [4, 2, 0]
        assert steps(filter={"even": True, "who": CANARY}, limit=2) == [4, 2]
        assert steps(filter={"step": 3}) == [3]
        assert steps(filter={"who": "someone else"}) == []
        assert steps(filter={"missing": None}, before=cfg(ids[3]), limit=2) == [2, 1]
        assert steps(filter={"even": False}, limit=1) == [5]
        assert [t.checkpoint["channel_values"] for t in saver.list(cfg(), filter={"step": 1})] == [
            {"text": f"{CANARY}-1"}
        ]

    for column in ("checkpoint", "metadata"):
        stored = raw(store_target, f"SELECT {column} FROM langgraph_checkpoints")
        assert len(stored) == 6 and all(sealed(value) for value in stored)
    values = raw(store_target, "SELECT value FROM langgraph_writes")
    assert len(values) == 2 and all(sealed(value) for value in values)
    if is_postgres(store_target):  # bytea holds the envelope; text its base64 form
        assert all(
            isinstance(v, bytes)
            for v in raw(store_target, "SELECT checkpoint FROM langgraph_checkpoints")
        )


async def test_the_read_only_view_opens_threads_and_streams_or_shows_them_sealed(
    store: Store, store_url: str, lease: Lease, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZINCIR_ENCRYPTION_KEYS", raising=False)
    value = json.dumps({"channel_values": {"text": CANARY}}).encode()
    packed = b"\x81\xa4text\xa9" + CANARY.encode()
    metadata = json.dumps({"step": 1, "who": CANARY})
    new = NewGraphCheckpoint("t", "", "0001", None, "json", value, metadata, run_id="r1")
    await store.put_graph_checkpoint(new)
    writes = [GraphWrite("task", 0, "say", "json", b'{"say":"' + CANARY.encode() + b'"}')]
    writes.append(GraphWrite("task", 1, "packed", "msgpack", packed))
    await store.put_graph_writes("t", "", "0001", writes)
    await store.append_stream(lease, [_item("part_delta", request=1)])

    with open_read_only(store_url, encryption=KEYS).snapshot() as view:
        (row,) = view.thread_checkpoints("t")
        assert row["metadata"] == {"step": 1, "who": CANARY} and row["size"] == len(value)
        (head,) = view.thread_heads("t")
        assert head["preview"] == {"channel_values": {"text": CANARY}}
        assert head["size"] == len(value) and head["preview_kind"] == "json"
        cut = view.thread_heads("t", preview_bytes=10)[0]
        assert (cut["preview_kind"], cut["preview"]) == ("text", value[:10].decode())
        said, kept = view.thread_writes("t", "", "0001")
        assert (said["preview"], said["size"]) == ({"say": CANARY}, len(writes[0].value))
        assert (kept["preview_kind"], kept["size"]) == ("none", len(packed))
        assert CANARY in view.read_stream("r1", 0)[0].payload_json
        tail = view.stream_tail("r1")
        assert tail is not None and CANARY in tail.payload_json

    with open_read_only(store_url).snapshot() as blind:  # no keys: the structure, sealed
        (row,) = blind.thread_checkpoints("t")
        assert row["metadata"] == SEALED and row["size"] == len(value)
        (head,) = blind.thread_heads("t")
        assert head["preview"] == SEALED and head["size"] == len(value)
        said, kept = blind.thread_writes("t", "", "0001")
        assert said["preview"] == SEALED and kept["size"] == len(packed)
        assert blind.read_stream("r1", 0)[0].payload_json == SEALED


def tamper(target: str, table: str, column: str) -> None:
    """Flip the last byte of every sealed value of ``table.column``, past zincir."""

    def flipped(value: Any) -> Any:
        if isinstance(value, str):
            envelope = bytearray(base64.b64decode(value[len("zs1:") :]))
            envelope[-1] ^= 1
            return "zs1:" + base64.b64encode(envelope).decode()
        envelope = bytearray(value)
        envelope[-1] ^= 1
        return bytes(envelope)

    update = f"UPDATE {table} SET {column} = ? WHERE {column} = ?"
    stored = raw(target, f"SELECT {column} FROM {table}")
    if is_postgres(target):
        import psycopg
        from psycopg import sql as pgsql

        from zincir.store.postgres._base import split_schema

        conninfo, schema, _ = split_schema(target)
        with psycopg.connect(conninfo) as conn:
            conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(schema)))
            for value in stored:
                conn.execute(update.replace("?", "%s"), (flipped(value), value))
        return
    conn = apsw.Connection(target)
    try:
        for value in stored:
            conn.execute(update, (flipped(value), value))
    finally:
        conn.close()


async def test_a_tampered_value_is_refused_naming_its_run(
    store: Store, store_url: str, lease: Lease
) -> None:
    arguments = json.dumps({"note": CANARY})
    new = NewApproval("r1", "c1", "refund", arguments, digest({"note": CANARY}), 1, "approval")
    await store.open_approvals(lease, [new])
    await store.send_message("r1", "inbox", json.dumps({"text": CANARY}))
    await store.save_restart_checkpoint("r1", "cp", 1, json.dumps({"text": CANARY}))
    await store.append_stream(lease, [_item("part_delta", request=1)])
    for table, column in [
        ("approvals", "arguments"),
        ("messages", "payload"),
        ("restart_checkpoints", "payload"),
        ("stream_items", "payload"),
    ]:
        tamper(store_url, table, column)
    reads = [
        store.get_approval("r1/c1"),
        store.list_approvals("r1"),
        store.receive_attempt(lease, "inbox", "recv-1", None),
        store.load_restart_checkpoint("r1", "cp"),
        store.read_stream("r1", 0),
    ]
    for read in reads:
        with pytest.raises(PayloadTampered, match=r"^\[run r1\]") as refused:
            await read
        assert refused.value.run_id == "r1"
