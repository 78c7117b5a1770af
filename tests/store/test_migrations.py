"""Numbered migrations: applied once each with their row, newer schemas refused, backfills."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import zincir
from tests.helpers import rows
from zincir import AgentContext, ToolCall
from zincir.store import migrations
from zincir.store.sqlite import _base as _sqlite


def test_every_migration_is_recorded_once(db_path: Path) -> None:
    zincir.open_store(db_path).close_sync()
    zincir.open_store(db_path).close_sync()
    applied = rows(db_path, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert applied == [(version, name) for version, name, _ in migrations()]
    assert [v for v, _ in applied] == list(range(1, len(applied) + 1))


def test_a_newer_schema_is_refused(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    future = [*migrations(), (len(migrations()) + 1, "future", "CREATE TABLE later (x);")]
    monkeypatch.setattr(_sqlite, "migrations", lambda: future)
    zincir.open_store(db_path).close_sync()
    monkeypatch.undo()
    with pytest.raises(zincir.SchemaTooNew, match="upgrade zincir"):
        zincir.open_store(db_path)


async def test_open_intents_are_backfilled_from_the_log(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = [m for m in migrations() if m[1] != "open_intents"]
    monkeypatch.setattr(_sqlite, "migrations", lambda: before)
    old = zincir.open_store(db_path)
    ctx = await AgentContext.create(old, name="old schema", run_id="legacy")
    # Intents and results written by a store that has no open_intents table yet.
    legacy = apsw.Connection(str(db_path))
    legacy.setbusytimeout(5000)
    with legacy:
        legacy.executemany(
            "INSERT INTO events (run_id, seq, type, payload, created_at, tool_call_id) "
            "VALUES ('legacy', ?, ?, ?, '2026-01-01T00:00:00.000000Z', ?)",
            [
                (2, "llm_call", '{"content":"x","tool_calls":[],"stop_reason":null}', None),
                (3, "tool_call", '{"id":"a","name":"t","arguments":{}}', "a"),
                (4, "tool_call", '{"id":"b","name":"t","arguments":{}}', "b"),
                (5, "tool_result", '{"id":"a","result":1,"is_error":false}', "a"),
            ],
        )
        legacy.execute("UPDATE agent_runs SET last_seq = 5 WHERE id = 'legacy'")
    legacy.close()
    await ctx._heartbeat.stop()
    await old.close()
    monkeypatch.undo()
    new = zincir.open_store(db_path)
    try:
        resumed = await AgentContext.force_recover(new, "legacy")
        assert [call.id for call in await resumed.pending_tools()] == ["b"]
        await resumed.record_response("more", [ToolCall("c", "t")])
        await resumed.record_tool_result("b", 2)
        assert [call.id for call in await resumed.pending_tools()] == ["c"]
        await resumed.close()
    finally:
        await new.close()
