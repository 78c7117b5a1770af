"""The floor under a LangGraph saver's super-step: its own statements from a bare loop.

    python benchmarks/langgraph_floor.py [N] [--graph ring|messages]

Per super-step a saver commits twice: the task's writes, then the next checkpoint (each
its own transaction, as LangGraph's ``durability="sync"`` asks). This issues exactly the
statements ``ZincirSaver`` issues on SQLite without a lease (the checkpoint's upsert with the
fence's test in it, alone in its transaction; the task's writes likewise, one multi-row insert
with the fence's test, alone in its transaction) through APSW, and
exactly SqliteSaver's (INSERT OR REPLACE / INSERT OR IGNORE in sqlite3's deferred
transaction) through sqlite3, with pre-serialized values of the benchmark graphs' sizes, at
FULL and at NORMAL: the fastest either saver could go on this machine with no graph and no
serializer around it.
Prints one JSON line of µs per super-step.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import time

import apsw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from zincir.store import open_store  # noqa: E402
from zincir.store._langgraph import (  # noqa: E402
    _PUT_CHECKPOINT_UNLEASED,
    _keep_writes_unleased,
)
from zincir.store.sqlite._log import register_functions  # noqa: E402

SQLITESAVER_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL
DEFAULT '', checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB,
metadata BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL
DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel
TEXT NOT NULL, type TEXT, value BLOB, task_path TEXT NOT NULL DEFAULT '', PRIMARY KEY
(thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
"""


def sizes(graph: str, step: int) -> tuple[int, int]:
    """(checkpoint bytes, write bytes) of a super-step of the benchmark graphs."""
    if graph == "messages":
        return 600 + 190 * (step % 100), 190
    return 700, 40


def zincir_floor(path: str, n: int, sync: str, graph: str) -> float:
    open_store(path, synchronous=sync).close_sync()  # the schema, migrated
    conn = apsw.Connection(path)
    register_functions(conn)
    conn.execute(f"PRAGMA synchronous={sync.upper()}")
    now = "2026-01-01T00:00:00.000000Z"  # the store's time, bound as the saver binds it
    meta = json.dumps({"source": "loop", "step": 1, "parents": {}})
    started = time.perf_counter()
    parent = None
    for step in range(n):
        checkpoint_bytes, write_bytes = sizes(graph, step)
        cid = f"{step:032d}"
        if parent is not None:  # the task's writes: one statement in its own transaction
            conn.execute(
                _keep_writes_unleased(2).sqlite,
                (now, "t", "", parent, "task", 0, "messages", "msgpack", b"w" * write_bytes, "")
                + ("t", "", parent, "task", 1, "branch:to:n", "null", b"", "", "t", now),
            )
        conn.execute(  # one statement in its own transaction (no run id: as the graphs run)
            _PUT_CHECKPOINT_UNLEASED.sqlite,
            ("t", "", cid, parent, None, "msgpack", b"c" * checkpoint_bytes, meta, now, "t", now),
        )
        parent = cid
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed / n * 1e6


def sqlitesaver_floor(path: str, n: int, sync: str, graph: str) -> float:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync.upper()}")
    conn.executescript(SQLITESAVER_SCHEMA)
    meta = json.dumps({"source": "loop", "step": 1, "parents": {}}).encode()
    started = time.perf_counter()
    parent = None
    for step in range(n):
        checkpoint_bytes, write_bytes = sizes(graph, step)
        cid = f"{step:032d}"
        if parent is not None:
            conn.executemany(
                "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id,"
                " task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    ("t", "", parent, "task", "", 0, "messages", "msgpack", b"w" * write_bytes),
                    ("t", "", parent, "task", "", 1, "branch:to:n", "null", b""),
                ],
            )
            conn.commit()
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("t", "", cid, parent, "msgpack", b"c" * checkpoint_bytes, meta),
        )
        conn.commit()
        parent = cid
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2000
    graph = sys.argv[sys.argv.index("--graph") + 1] if "--graph" in sys.argv else "ring"
    folder = tempfile.mkdtemp(prefix="zincir-lg-floor-")
    result: dict[str, float] = {}
    for sync in ("full", "normal"):
        result[f"zincir_{sync}_us"] = zincir_floor(f"{folder}/z-{sync}.db", n, sync, graph)
        result[f"sqlitesaver_{sync}_us"] = sqlitesaver_floor(
            f"{folder}/s-{sync}.db", n, sync, graph
        )
    print(json.dumps({"graph": graph, "n": n, **result}))


if __name__ == "__main__":
    main()
