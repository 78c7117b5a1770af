"""The store layer's read-only view (``zincir.store.sqlite.ReadOnlyDatabase``) on its own.

It is what the inspector and ``zincir runs`` read through: typed rows, JSON decoded once,
tolerant of an older schema and of stored text that is not strict JSON, and it never
creates, migrates or writes a file.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import zincir
from tests.inspector.conftest import client_for, digest, seed
from zincir import NotAZincirDatabase
from zincir.store import RUN_COLUMNS
from zincir.store.sqlite import ReadOnlyDatabase


async def string_result(store: zincir.SQLiteStore) -> str:
    ctx = await zincir.AgentContext.create(store, name="strings", config={"n": "1"})
    await ctx.record_response("42", [], "end_turn")
    await ctx.complete("123")
    return ctx.run_id


def test_json_is_decoded_once(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    run_id = seed(path, string_result)
    with ReadOnlyDatabase(path).snapshot() as reader:
        run = reader.get_run(run_id)
        assert run is not None
        assert run["result"] == '"123"' and run["config"] == '{"n":"1"}'  # stored text
        assert reader.events(run_id)[1]["payload"]["content"] == "42"
    body = client_for(path).get(f"/api/runs/{run_id}").json()
    assert body["run"]["result"] == "123" and body["config"] == {"n": "1"}
    assert body["events"][1]["payload"]["content"] == "42"


def test_a_payload_that_is_not_strict_json_is_shown_as_text(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    run_id = seed(path, string_result)
    conn = apsw.Connection(str(path))  # a row no zincir writer produces
    conn.execute(
        "UPDATE events SET payload = ? WHERE run_id = ? AND seq = 2", ('{"a": 1, "a": 2}', run_id)
    )
    conn.execute(
        "UPDATE events SET payload = ? WHERE run_id = ? AND seq = 1",
        ("[" * 100_000 + "]" * 100_000, run_id),
    )
    conn.close()
    with ReadOnlyDatabase(path).snapshot() as reader:
        events = reader.events(run_id)
    assert events[1]["payload"] == '{"a": 1, "a": 2}'
    assert isinstance(events[0]["payload"], str)


def test_an_older_schema_reads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "old.db"

    async def intent(store: zincir.SQLiteStore) -> str:
        ctx = await zincir.AgentContext.create(store, name="old")
        await ctx.record_response("", [{"id": "c1", "name": "t", "arguments": {}}], "tool_use")
        await ctx.close()
        return ctx.run_id

    run_id = seed(path, intent)
    conn = apsw.Connection(str(path))  # back to schema 1: no waits, no open intents
    conn.execute(
        "DROP TABLE open_intents; DROP INDEX messages_to; DROP INDEX messages_from;"
        "ALTER TABLE agent_runs DROP COLUMN wait_kind;"
        "ALTER TABLE agent_runs DROP COLUMN wait_ref;"
        "ALTER TABLE agent_runs DROP COLUMN wait_until;"
        "DELETE FROM schema_migrations WHERE version > 1;"
    )
    conn.close()
    before = digest(path)
    with ReadOnlyDatabase(path).snapshot() as reader:
        (run,) = reader.list_runs()
        assert tuple(run) == RUN_COLUMNS and run["wait_kind"] is None
        (pending,) = reader.pending_tools(run_id)
        assert pending["tool_call_id"] == "c1" and pending["payload"]["name"] == "t"
        assert reader.messages(run_id) == [] and reader.steps(run_id) == []
    assert digest(path) == before  # read, never migrated


def test_a_missing_file_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(NotAZincirDatabase, match="no database"):
        ReadOnlyDatabase(missing).check()
    assert list(tmp_path.iterdir()) == []
