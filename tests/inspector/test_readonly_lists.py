"""The read-only view's lookups by a list of ids, on every backend: any number of ids in
one statement (more than SQLite binds as variables), each looked up in its index."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import apsw

import zincir
from zincir.store._readonly import open_read_only
from zincir.store.sqlite import ReadOnlyDatabase

CALLS: list[dict[str, Any]] = [
    {"id": call_id, "name": "t", "arguments": {}} for call_id in ("c1", "c2")
]


def seed_intents(target: str) -> str:
    """A run with two tool intents, ``c1`` answered and ``c2`` not; its id."""

    async def main() -> str:
        store = zincir.open_store(target)
        try:
            ctx = await zincir.AgentContext.create(store, name="lists")
            await ctx.record_response("", CALLS, "tool_use")
            await ctx.record_tool_result("c1", {"ok": True})
            await ctx.close()
            return ctx.run_id
        finally:
            await store.close()

    return asyncio.run(main())


def test_lookups_take_more_ids_than_sqlite_binds(store_target: str) -> None:
    run_id = seed_intents(store_target)
    ids = [*(f"unknown-{i}" for i in range(40_000)), "c2", "c1", "c1"]
    with open_read_only(store_target).snapshot() as reader:
        assert reader.answered(run_id, ids) == {"c1"}
        assert [row["tool_call_id"] for row in reader.tool_intents(run_id, ids)] == ["c1", "c2"]
        assert set(reader.result_seqs(run_id, ids)) == {"c1"}
        assert [row["tool_call_id"] for row in reader.pending_tools(run_id)] == ["c2"]


def test_intents_are_read_from_their_index_not_the_log(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    run_id = seed_intents(str(path))
    seen: list[tuple[str, Any]] = []

    def trace(_cursor: apsw.Cursor, statement: str, bindings: Any) -> bool:
        seen.append((statement, bindings))
        return True

    with ReadOnlyDatabase(path).snapshot() as reader:
        reader._conn.exec_trace = trace
        assert len(reader.tool_intents(run_id, ["c1", "c2"])) == 2
    ((statement, bindings),) = [(s, b) for s, b in seen if "'tool_call'" in s]
    conn = apsw.Connection(str(path))
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}", bindings)]
    conn.close()
    assert any("INDEX events_one_intent (run_id=? AND tool_call_id=?)" in step for step in plan)
    assert not any("PRIMARY KEY" in step for step in plan), plan
