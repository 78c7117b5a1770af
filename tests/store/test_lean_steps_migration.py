"""The lean-steps migration: a step's result moves from its claim row into its
``step_completed`` event (live or archived), the claims keep their holders, the ``steps``
view reads as the table did, and a database it cannot move faithfully is left as it was."""

from __future__ import annotations

import json
from typing import Any

import apsw
import pytest

import zincir
from tests.helpers import is_postgres, select
from zincir import AgentContext, StepInProgress, WorkflowContext
from zincir.store.postgres import _base as _postgres
from zincir.store.sqlite import _base as _sqlite

AT = "2026-01-01T00:00:0{}.000000Z"
OLD_STEPS = [
    # name, status, claim owner, token, result, started, completed, event seq (archived?)
    ("old", "completed", "gone:1", 1, '{"rows":[1,2]}', AT.format(1), AT.format(2), 2, True),
    ("fetch", "completed", "gone:1", 1, '"price 3"', AT.format(3), AT.format(4), 3, False),
    ("nothing", "completed", "gone:1", 1, "null", AT.format(5), AT.format(6), 4, False),
    ("pending", "running", "gone:1", 1, None, AT.format(7), None, None, False),
]


def _before_lean_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both backends migrate only as far as the schema before the lean steps (without the
    later redefinition of their view, too)."""
    steps_view = ("lean_steps", "sealed_step_results")
    for backend in (_sqlite, _postgres):
        older = [m for m in backend.migrations() if m[1] not in steps_view]
        assert len(older) == len(backend.migrations()) - 2
        monkeypatch.setattr(backend, "migrations", lambda older=older: older)


def _write(target: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Run ``statements`` (``?`` placeholders) in one transaction on either backend."""
    if not is_postgres(target):
        conn = apsw.Connection(target)
        conn.setbusytimeout(5000)
        try:
            with conn:
                for sql, params in statements:
                    conn.execute(sql, params)
        finally:
            conn.close()
        return
    import psycopg
    from psycopg import sql as pgsql

    conninfo, schema, _ = _postgres.split_schema(target)
    with psycopg.connect(conninfo) as conn, conn.transaction():
        conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(schema)))
        for sql, params in statements:
            conn.execute(sql.replace("?", "%s"), params)


def _old_rows(run_id: str, steps: list[tuple[Any, ...]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The rows an earlier zincir wrote for ``steps``: the result on the claim row, and an
    event (live, or archived by compaction) that names the step only."""
    statements: list[tuple[str, tuple[Any, ...]]] = []
    for name, status, owner, token, result, started, completed, seq, archived in steps:
        statements.append(
            (
                "INSERT INTO steps (run_id, name, status, claim_owner, claim_token, result, "
                "started_at, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, name, status, owner, token, result, started, completed),
            )
        )
        if seq is not None:
            table = "archived_events" if archived else "events"
            statements.append(
                (
                    f"INSERT INTO {table} (run_id, seq, type, payload, created_at) "
                    "VALUES (?, ?, 'step_completed', ?, ?)",
                    (run_id, seq, json.dumps({"name": name}), completed),
                )
            )
    last = max(step[7] for step in steps if step[7] is not None)
    statements.append(("UPDATE agent_runs SET last_seq = ? WHERE id = ?", (last, run_id)))
    return statements


async def _old_database(target: str, monkeypatch: pytest.MonkeyPatch, run_id: str) -> None:
    """A database at the schema before the lean steps, with ``OLD_STEPS`` written as an
    earlier zincir did (a run with one transition at seq 1, its lease released)."""
    _before_lean_steps(monkeypatch)
    store = zincir.open_store(target)
    try:
        ctx = await AgentContext.create(store, name="workflow", run_id=run_id)
        await ctx.release()
    finally:
        await store.close()
    _write(target, _old_rows(run_id, OLD_STEPS))
    monkeypatch.undo()


async def test_results_move_into_their_events(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _old_database(store_target, monkeypatch, "wf")
    store = zincir.open_store(store_target)
    try:
        view = select(
            store_target,
            "SELECT name, status, claim_owner, claim_token, result, started_at, completed_at "
            "FROM steps ORDER BY started_at",
        )
        assert view == [step[:7] for step in OLD_STEPS]
        payloads = {
            seq: json.loads(payload)
            for table in ("events", "archived_events")
            for seq, payload in select(
                store_target, f"SELECT seq, payload FROM {table} WHERE type = 'step_completed'"
            )
        }
        assert payloads == {
            2: {"name": "old", "result": {"rows": [1, 2]}},
            3: {"name": "fetch", "result": "price 3"},
            4: {"name": "nothing", "result": None},
        }
        claims = select(
            store_target, "SELECT name, claim_owner, claim_token, event_seq FROM step_claims"
        )
        assert sorted(claims) == [
            ("fetch", "gone:1", 1, 3),
            ("nothing", "gone:1", 1, 4),
            ("old", "gone:1", 1, 2),
            ("pending", "gone:1", 1, None),
        ]

        # The migrated run replays its finished steps and keeps the dead owner's claim.
        ran: list[str] = []
        wf = await WorkflowContext.open(store, "wf")
        assert await wf.step("old", lambda: ran.append("old")) == {"rows": [1, 2]}
        assert await wf.step("fetch", lambda: ran.append("fetch")) == "price 3"
        assert await wf.step("nothing", lambda: ran.append("nothing")) is None
        with pytest.raises(StepInProgress, match="gone:1"):
            await wf.step("pending", lambda: ran.append("pending"))
        assert await wf.recover() == ["pending"]
        assert await wf.step("pending", lambda: "done") == "done"
        assert ran == []
        await wf.complete()
        assert select(store_target, "SELECT status, result FROM steps WHERE name = 'pending'") == [
            ("completed", '"done"')
        ]
    finally:
        await store.close()


async def test_a_completed_step_without_its_event_stops_the_migration(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _old_database(store_target, monkeypatch, "wf")
    _write(
        store_target,
        [
            (
                "INSERT INTO steps (run_id, name, status, claim_owner, claim_token, result, "
                "started_at, completed_at) VALUES ('wf', 'lost', 'completed', 'gone:1', 1, "
                "'7', ?, ?)",
                (AT.format(8), AT.format(9)),
            )
        ],
    )
    before = select(store_target, "SELECT version FROM schema_migrations ORDER BY version")
    with pytest.raises(zincir.StoreError, match="event_of_completed_step"):
        zincir.open_store(store_target)
    # Nothing moved: the old table, its results and the events are as they were.
    assert select(store_target, "SELECT version FROM schema_migrations ORDER BY version") == before
    assert sorted(
        select(store_target, "SELECT name, result FROM steps WHERE name IN ('lost', 'fetch')")
    ) == [("fetch", '"price 3"'), ("lost", "7")]
    assert select(store_target, "SELECT payload FROM events WHERE seq = 3") == [
        ('{"name": "fetch"}',)
    ]
