"""LangGraph threads for the inspector and CLI tests: rows as zincir's saver stores them.

The database is created and migrated by ``zincir.open_store``; the rows are then inserted
with APSW in the saver's layout (serialized values as (type tag, bytes), metadata as JSON
text), so these tests do not depend on LangGraph being installed.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

import zincir
from tests.inspector.seed import XSS_CLOSE, XSS_IMG, XSS_SCRIPT, XSS_URL

PLAIN = "thread-plain"
XSS_THREAD = "<script>document.title='pwned'</script>/x?y#z"
PACKED = "thread-msgpack"
BIG = "thread-big"
ALL = (PLAIN, XSS_THREAD, PACKED, BIG)

# hand-made msgpack ({"secret": "MSGPACK-SECRET"}): text no reader may decode or show
MSGPACK_SECRET = "MSGPACK-SECRET"
MSGPACK_VALUE = b"\x81\xa6secret\xae" + MSGPACK_SECRET.encode()
RAW_SECRET = "RAW-BYTES-SECRET"
BIG_TAIL = "the-tail-that-must-not-show"
BIG_SIZE = 200_000


@dataclass(frozen=True)
class Checkpoint:
    thread_id: str
    checkpoint_id: str
    parent: str | None
    metadata: dict[str, Any]
    value: Any = None
    type: str = "json"
    raw: bytes = b""
    ns: str = ""
    created_at: str = "2025-01-01T00:00:00.000000Z"


def checkpoint_id(n: int) -> str:
    """A uuid6-like id: later ``n`` sorts later, as LangGraph's ids do by time."""
    return f"1f0{n:05x}-0000-6000-8000-{n:012x}"


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _checkpoint_rows() -> list[Checkpoint]:
    plain = [
        Checkpoint(
            PLAIN,
            checkpoint_id(n),
            checkpoint_id(n - 1) if n > 1 else None,
            {"source": "loop" if n > 1 else "input", "step": n - 1, "run_id": "lg-run-1"},
            {"v": 4, "id": checkpoint_id(n), "channel_values": {"messages": ["hi"] * n}},
            created_at=f"2025-01-01T00:00:0{n}.000000Z",
        )
        for n in (1, 2, 3)
    ]
    child = Checkpoint(
        PLAIN,
        checkpoint_id(4),
        None,
        {"source": "loop", "step": 0, "parents": {"": checkpoint_id(3)}},
        {"v": 4, "channel_values": {"inner": True}},
        ns="child:task-1",
        created_at="2025-01-01T00:00:04.000000Z",
    )
    xss = [
        Checkpoint(
            XSS_THREAD,
            checkpoint_id(10),
            None,
            {"source": XSS_SCRIPT, "step": 0, "note": XSS_IMG, "link": XSS_URL},
            {"v": 4, "channel_values": {"evil": XSS_CLOSE}},
            created_at="2025-01-02T00:00:00.000000Z",
        ),
        Checkpoint(
            XSS_THREAD,
            checkpoint_id(11),
            checkpoint_id(10),
            {"source": "loop", "step": 1, "writes": {XSS_IMG: XSS_SCRIPT}},
            {"v": 4, "channel_values": {"evil": XSS_IMG}},
            ns=XSS_IMG,
            created_at="2025-01-02T00:00:01.000000Z",
        ),
    ]
    packed = Checkpoint(
        PACKED,
        checkpoint_id(20),
        None,
        {"source": "input", "step": -1},
        type="msgpack",
        raw=MSGPACK_VALUE,
        created_at="2025-01-03T00:00:00.000000Z",
    )
    big = Checkpoint(
        BIG,
        checkpoint_id(30),
        None,
        {"source": "loop", "step": 7},
        {"blob": "x" * BIG_SIZE + BIG_TAIL},
        created_at="2025-01-04T00:00:00.000000Z",
    )
    return [*plain, child, *xss, packed, big]


# (thread, ns, checkpoint, task id, idx, channel, type, value, task path)
Write = tuple[str, str, str, str, int, str, str, bytes, str]


def _write_rows() -> list[Write]:
    latest = checkpoint_id(3)
    return [
        (PLAIN, "", latest, "task-a", 0, "messages", "json", _json({"say": "hello"}), "~a"),
        (PLAIN, "", latest, "task-a", 1, "packed", "msgpack", MSGPACK_VALUE, "~a"),
        (PLAIN, "", latest, "task-b", 0, "empty", "null", b"", "~b"),
        (PLAIN, "", latest, "task-b", 1, "raw", "bytes", RAW_SECRET.encode(), "~b"),
        (PLAIN, "", latest, "task-b", -3, "__interrupt__", "json", _json([{"value": 1}]), "~b"),
        (PLAIN, "", checkpoint_id(2), "task-old", 0, "messages", "json", _json("old"), "~o"),
        (PLAIN, "child:task-1", checkpoint_id(4), "task-c", 0, "inner", "json", _json(1), "~c"),
        (
            XSS_THREAD,
            "",
            checkpoint_id(10),
            XSS_SCRIPT,
            0,
            XSS_IMG,
            "json",
            _json({"evil": XSS_CLOSE, "url": XSS_URL}),
            XSS_IMG,
        ),
        (XSS_THREAD, "", checkpoint_id(10), "task-bad", 1, "bad", "json", b"\xff\xfe{", ""),
        (BIG, "", checkpoint_id(30), "task-big", 0, "blob", "json", _json("y" * BIG_SIZE), ""),
    ]


def checkpoint_values(c: Checkpoint) -> tuple[Any, ...]:
    """The ``langgraph_checkpoints`` column values of ``c``, in the seeding INSERT's order
    (the same on SQLite and PostgreSQL)."""
    return (
        c.thread_id,
        c.ns,
        c.checkpoint_id,
        c.parent,
        c.metadata.get("run_id"),
        c.type,
        c.raw if c.type != "json" else _json(c.value),
        json.dumps(c.metadata, ensure_ascii=False),
        c.created_at,
    )


def seed_threads(path: Path) -> None:
    """Create and migrate a zincir database at ``path`` and add the seeded threads."""

    async def migrate() -> None:
        await zincir.open_store(path).close()

    asyncio.run(migrate())
    conn = apsw.Connection(str(path))
    try:
        with conn:
            for c in _checkpoint_rows():
                conn.execute(
                    "INSERT INTO langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                    "parent_checkpoint_id, run_id, type, checkpoint, metadata, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    checkpoint_values(c),
                )
            for row in _write_rows():
                conn.execute(
                    "INSERT INTO langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, "
                    "task_id, idx, channel, type, value, task_path, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '2025-01-05T00:00:00.000000Z')",
                    row,
                )
            conn.execute(
                "INSERT INTO langgraph_thread_leases (thread_id, owner, token, expires_at, "
                "updated_at) VALUES (?, 'worker-a', 3, '2999-01-01T00:00:00.000000Z', "
                "'2025-01-05T00:00:00.000000Z'), (?, NULL, 2, NULL, "
                "'2025-01-05T00:00:00.000000Z')",
                (PLAIN, PACKED),
            )
    finally:
        conn.close()
    conn = apsw.Connection(str(path))  # leave no WAL behind: digests then cover every byte
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
