"""The inspector over a PostgreSQL schema: the same pages, JSON and rows as over SQLite, read
in read-only transactions that never change a byte of the schema.

The runs are seeded through zincir's APIs (AgentContext, WorkflowContext, LocalRuntime) on
``zincir.open_store(url)``; the LangGraph rows are inserted as zincir's saver stores them
(as ``seed_threads`` does for SQLite), so both backends can be compared row for row.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner
from psycopg import sql
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import ADDRESS, BASE_URL, seed
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import (
    DUE_TIMER_RUN,
    OPERATIONS_RUN,
    WORKFLOW_RUN,
    Seeded,
    seed_agent_runs,
    seed_due_timer,
    seed_operations,
    seed_workflow,
)
from tests.inspector.seed_threads import (
    ALL,
    MSGPACK_SECRET,
    PACKED,
    PLAIN,
    RAW_SECRET,
    _checkpoint_rows,
    _write_rows,
    checkpoint_values,
    seed_threads,
)
from tests.postgres_server import PostgresServer, free_port, schema_name
from zincir import SchemaTooNew, StoreUnavailable
from zincir._errors import ConnectionLost
from zincir.inspector import _cli as inspector_cli
from zincir.inspector import create_app, ui_command
from zincir.inspector._app import run_url
from zincir.inspector._threads import thread_url
from zincir.store import Store
from zincir.store._readonly import ReadOnlySnapshot, open_read_only
from zincir.store.postgres import split_schema
from zincir.store.postgres._readonly import ReadOnlyPostgres

T = TypeVar("T")


@dataclass(frozen=True)
class Schema:
    """A seeded PostgreSQL schema and the ids of what was seeded in it."""

    url: str
    name: str
    runs: Seeded


def seed_pg(url: str, fill: Callable[[Store], Awaitable[T]], clock: Any = None) -> T:
    """Open (and migrate) the store at ``url``, run ``fill`` on it, close it."""

    async def main() -> T:
        store = zincir.open_store(url, clock=clock)
        try:
            return await fill(store)
        finally:
            await store.close()

    return asyncio.run(main())


def insert_threads(server: PostgresServer, schema: str) -> None:
    """The LangGraph rows of ``seed_threads``, as zincir's saver stores them."""
    with server.admin() as conn, conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
        for c in _checkpoint_rows():
            conn.execute(
                "INSERT INTO langgraph_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, run_id, type, checkpoint, metadata, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::timestamptz)",
                checkpoint_values(c),
            )
        for row in _write_rows():
            conn.execute(
                "INSERT INTO langgraph_writes (thread_id, checkpoint_ns, checkpoint_id, "
                "task_id, idx, channel, type, value, task_path, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, '2025-01-05T00:00:00Z')",
                row,
            )
        conn.execute(
            "INSERT INTO langgraph_thread_leases (thread_id, owner, token, expires_at, "
            "updated_at) VALUES (%s, 'worker-a', 3, '2999-01-01T00:00:00Z', "
            "'2025-01-05T00:00:00Z'), (%s, NULL, 2, NULL, '2025-01-05T00:00:00Z')",
            (PLAIN, PACKED),
        )


def contents(server: PostgresServer, schema: str) -> dict[str, str]:
    """A digest of every table of ``schema`` (all rows, in a stable order) and the state of
    every sequence: equal digests mean nothing was written."""
    found: dict[str, str] = {}
    with server.admin() as conn:
        for (table,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall():
            row = conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' "
                    "ORDER BY t::text COLLATE \"C\"), '')) FROM {} AS t"
                ).format(sql.Identifier(schema, table))
            ).fetchone()
            found[f"table {table}"] = repr(row)
        for name, last in conn.execute(
            "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = %s", (schema,)
        ).fetchall():
            found[f"sequence {name}"] = repr(last)
    return found


@pytest.fixture(scope="module")
def pg(postgres_server: PostgresServer) -> Iterator[Schema]:
    """A schema with the agent runs of the SQLite inspector tests and the LangGraph threads."""
    name = schema_name("inspector_pages", secrets.token_hex(4))
    url = postgres_server.new_schema_url(name)
    try:
        runs = seed_pg(url, seed_agent_runs)
        insert_threads(postgres_server, name)
        yield Schema(url, name, runs)
    finally:
        postgres_server.drop_schema(name)


@pytest.fixture(scope="module")
def client(pg: Schema) -> TestClient:
    return TestClient(create_app(pg.url, address=ADDRESS), base_url=BASE_URL)


@pytest.fixture(scope="module")
def workflow(postgres_server: PostgresServer) -> Iterator[TestClient]:
    """A schema holding steps, timers, messages, a child run and operations."""
    name = schema_name("inspector_workflow", secrets.token_hex(4))
    url = postgres_server.new_schema_url(name)
    try:

        async def fill(store: Store) -> tuple[str | None, str | None]:
            return await seed_workflow(store), await seed_operations(store)

        seed_pg(url, fill)
        an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
        seed_pg(url, seed_due_timer, clock=lambda: an_hour_ago)
        yield TestClient(create_app(url, address=ADDRESS), base_url=BASE_URL)
    finally:
        postgres_server.drop_schema(name)


def section(html: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}".*?</section>', html, re.S)
    assert match, anchor
    return match.group(0)


# -- the pages --------------------------------------------------------------------------------


def test_the_run_list(client: TestClient, pg: Schema) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for run_id in pg.runs.all:
        assert f'href="{run_url(run_id)}"' in page.text
    assert "held by" in page.text  # the in-doubt run's live lease
    assert page.text.count('class="badge status-completed"') == 2
    assert page.text.count('class="badge status-failed"') == 2
    assert f"?schema={pg.name}" in page.text  # the database named, without a password
    running = client.get("/api/runs", params={"status": "running"}).json()
    assert {run["id"] for run in running["runs"]} == {pg.runs.in_doubt, pg.runs.parent}
    times = [run["updated_at"] for run in client.get("/api/runs").json()["runs"]]
    assert times == sorted(times, reverse=True) and all(t.endswith("Z") for t in times)


def test_a_run_page_with_events_checkpoint_and_usage(client: TestClient, pg: Schema) -> None:
    text = client.get(run_url(pg.runs.completed)).text
    assert "&#34;goal&#34;: &#34;Compare the proposals&#34;" in text
    assert text.count("<details>") == 8
    assert 'class="badge status-accepted"' in text and "12 passed" in text
    assert "2,700" in text and "380" in text  # usage totals over both llm_calls
    body = client.get(f"/api/runs/{pg.runs.completed}").json()
    assert body["usage"] == {"input_tokens": 2700, "output_tokens": 380}
    assert body["run"]["result"] == {"summary": "output/call_1.json"}
    assert [e["seq"] for e in body["events"]] == list(range(1, 9))
    assert body["events"][1]["payload"]["tool_calls"][0]["name"] == "write_file"
    assert body["checkpoints"][0]["lineage_seq"] == 5


def test_a_pending_intent_is_in_doubt(client: TestClient, pg: Schema) -> None:
    text = client.get(run_url(pg.runs.in_doubt)).text
    assert re.findall(r'<li id="e(\d+)" class="event flag-pending">', text) == ["4"]
    detail = client.get(f"/api/runs/{pg.runs.in_doubt}").json()
    assert [(t["id"], t["name"]) for t in detail["pending_tools"]] == [("mail-77", "send_email")]
    assert detail["run"]["lease"]["state"] == "held"


def test_parent_and_child_link_each_other(client: TestClient, pg: Schema) -> None:
    parent = client.get(f"/api/runs/{pg.runs.parent}").json()
    assert [c["id"] for c in parent["children"]] == [pg.runs.child]
    assert client.get(f"/api/runs/{pg.runs.child}").json()["parent"]["id"] == pg.runs.parent


def test_stored_text_is_inert(client: TestClient, pg: Schema) -> None:
    for path in ("/", run_url(pg.runs.xss), "/threads", *(thread_url(t) for t in ALL)):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_inert(response.text)


def test_threads(client: TestClient) -> None:
    page = client.get("/threads").text
    for thread_id in ALL:
        assert f'href="{thread_url(thread_id)}"' in page
    assert "held by" in page and "worker-a" in page
    plain = client.get("/api" + thread_url(PLAIN)).json()
    assert plain["thread"]["checkpoints"] == 4 and plain["thread"]["pending_writes"] == 1
    packed = client.get(thread_url(PACKED)).text
    assert MSGPACK_SECRET not in packed and RAW_SECRET not in client.get(thread_url(PLAIN)).text
    assert client.get(thread_url("missing")).status_code == 404


def test_unknown_runs_are_404(client: TestClient) -> None:
    assert client.get("/runs/missing").status_code == 404
    assert client.get("/api/runs/missing").json()["status"] == 404


# -- the same rows as SQLite ------------------------------------------------------------------


def shape(value: Any) -> Any:
    """A value's structure: keys and value types, not the values (ids and times differ)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [shape(item) for item in value]
    return type(value).__name__


def reads(reader: ReadOnlySnapshot, runs: Seeded) -> dict[str, Any]:
    """Every run query of the reader over the seeded runs."""
    out: dict[str, Any] = {"list_runs": reader.list_runs(), "failed": reader.list_runs("failed")}
    for role in ("completed", "in_doubt", "failed", "parent", "child", "xss"):
        run_id = getattr(runs, role)
        run = reader.get_run(run_id)
        assert run is not None
        events = reader.events(run_id)
        call_ids = [str(e["tool_call_id"]) for e in events if e["tool_call_id"]]
        out[role] = {
            "run": run,
            "children": reader.children(run_id),
            "events": events,
            "page": reader.events(run_id, 2, 3),
            "all": list(reader.iter_events(run_id, page_size=2)),
            "answered": sorted(reader.answered(run_id, call_ids)),
            "intents": reader.tool_intents(run_id, call_ids),
            "results": reader.result_seqs(run_id, call_ids),
            "pending": reader.pending_tools(run_id),
            "usage": reader.usage(run),
            "checkpoints": reader.checkpoints(run_id),
            "restart": reader.restart_checkpoints(run_id),
            "operations": reader.operations(run_id),
            "outcomes": reader.operation_outcomes(run_id, [("model", 0)]),
            "model": reader.first_model_request(run_id),
            "steps": reader.steps(run_id),
            "timers": reader.timers(run_id),
            "messages": reader.messages(run_id),
        }
    return out


def thread_reads(reader: ReadOnlySnapshot) -> dict[str, Any]:
    """Every thread query of the reader over the seeded threads, small previews included."""
    out: dict[str, Any] = {"threads": reader.threads(), "two": reader.threads(2)}
    for thread_id in (*ALL, "missing"):
        heads = reader.thread_heads(thread_id)
        out[thread_id] = {
            "thread": reader.thread(thread_id),
            "checkpoints": reader.thread_checkpoints(thread_id),
            "first": reader.thread_checkpoints(thread_id, 2),
            "heads": heads,
            "small": reader.thread_heads(thread_id, 1, preview_bytes=10),
            "writes": [
                reader.thread_writes(thread_id, h["checkpoint_ns"], h["checkpoint_id"])
                for h in heads
            ],
            "small_writes": [
                reader.thread_writes(
                    thread_id, h["checkpoint_ns"], h["checkpoint_id"], 2, preview_bytes=5
                )
                for h in heads
            ],
        }
    return out


def test_every_run_query_returns_the_rows_sqlite_returns(pg: Schema, tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    runs = seed(path, seed_agent_runs)
    with open_read_only(path).snapshot() as reader:
        lite = reads(reader, runs)
    with open_read_only(pg.url).snapshot() as reader:
        postgres = reads(reader, pg.runs)
    assert shape(postgres) == shape(lite)
    assert postgres["completed"]["usage"] == lite["completed"]["usage"]
    assert [e["type"] for e in postgres["xss"]["events"]] == [
        e["type"] for e in lite["xss"]["events"]
    ]
    assert postgres["completed"]["run"]["created_at"].endswith("Z")
    assert len(postgres["completed"]["run"]["created_at"]) == len("2030-01-01T00:00:00.000000Z")


def test_every_thread_query_returns_the_rows_sqlite_returns(pg: Schema, tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    seed_threads(path)
    with open_read_only(path).snapshot() as reader:
        lite = thread_reads(reader)
    with open_read_only(pg.url).snapshot() as reader:
        postgres = thread_reads(reader)
    assert postgres == lite  # the same rows, values and times included


# -- read-only ----------------------------------------------------------------------------


METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")


def routes(runs: Seeded) -> list[str]:
    """Every route of the inspector, over every seeded run and thread, and some misses."""
    paths = ["/", "/?status=running", "/api/runs", "/api/runs?status=failed", "/threads"]
    paths += ["/api/threads", "/static/inspector.css", "/nowhere", "/runs/missing"]
    for run_id in runs.all:
        paths += [run_url(run_id), run_url(run_id) + "?page=2", "/api" + run_url(run_id)]
    for thread_id in (*ALL, "missing"):
        paths += [thread_url(thread_id), "/api" + thread_url(thread_id)]
    return paths


def test_no_route_or_method_writes(
    client: TestClient, pg: Schema, postgres_server: PostgresServer
) -> None:
    before = contents(postgres_server, pg.name)
    assert "table agent_runs" in before and "sequence messages_id_seq" in before
    for path in routes(pg.runs):
        for method in METHODS:
            response = client.request(method, path, content=b"status=cancelled")
            assert response.status_code in (200, 404, 405), (method, path)
        assert client.get(path, headers={"host": "evil.example"}).status_code == 403
    assert contents(postgres_server, pg.name) == before


def test_a_snapshot_cannot_write(pg: Schema) -> None:
    view = ReadOnlyPostgres(pg.url)
    with view.snapshot() as reader:
        conn = reader._conn
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    assert conn.closed  # one short connection per snapshot


def test_a_snapshot_is_consistent(postgres_url: str) -> None:
    """A run created while a snapshot is open is not in it: one transaction per page."""

    async def another(store: Store) -> str:
        ctx = await zincir.AgentContext.create(store, name="late")
        await ctx.close()
        return ctx.run_id

    first = seed_pg(postgres_url, another)
    with open_read_only(postgres_url).snapshot() as reader:
        assert [run["id"] for run in reader.list_runs()] == [first]
        late = seed_pg(postgres_url, another)
        assert [run["id"] for run in reader.list_runs()] == [first]
        assert reader.get_run(late) is None
    with open_read_only(postgres_url).snapshot() as reader:
        assert reader.get_run(late) is not None


# -- workflow state ---------------------------------------------------------------------------


def test_steps_timers_messages_children_and_operations(workflow: TestClient) -> None:
    body = workflow.get(f"/api/runs/{WORKFLOW_RUN}").json()
    assert [(s["name"], s["status"]) for s in body["steps"]] == [
        ("fetch-data", "completed"),
        ("generate-report", "completed"),
    ]
    assert {t["name"]: t["state"] for t in body["timers"]} == {
        "cool-down": "completed",
        "nightly-retry": "waiting",
    }
    assert body["run"]["wait_kind"] == "timer"
    assert {m["topic"] for m in body["messages"]} == {"self-note", "instructions", "approval"}
    (child,) = body["children"]
    assert child["name"] == "summariser" and child["spawn_name"] == "summarise"
    due = workflow.get(f"/api/runs/{DUE_TIMER_RUN}").json()
    assert [(t["name"], t["state"]) for t in due["timers"]] == [("backoff", "due")]
    page = workflow.get(run_url(OPERATIONS_RUN)).text
    ops = section(page, "operations")
    for outcome in ("success", "failure", "suspended"):
        assert f'class="badge outcome-{outcome}">{outcome}' in ops
    operations = workflow.get(f"/api/runs/{OPERATIONS_RUN}").json()["operations"]
    assert [(o["sequence"], o["outcome"]) for o in operations] == [
        (0, "success"),
        (1, "failure"),
        (2, "suspended"),
    ]
    assert operations[1]["outcome_detail"]["error"] == "RateLimited"
    for path in ("/", run_url(WORKFLOW_RUN), run_url(OPERATIONS_RUN), run_url(DUE_TIMER_RUN)):
        assert_inert(workflow.get(path).text)


# -- what cannot be read ----------------------------------------------------------------------


async def two_calls(store: Store) -> str:
    ctx = await zincir.AgentContext.create(store, name="usage")
    await ctx.record_response("a", [], "end_turn", usage={"input_tokens": 1, "cost": 0.5})
    await ctx.record_response("b", [], "end_turn", usage={"input_tokens": 2, "cost": 0.25})
    await ctx.record_response("c", [], "end_turn", usage={"input_tokens": 4, "cost": 1})
    await ctx.complete()
    return ctx.run_id


def test_usage_skips_a_payload_that_is_not_json(
    postgres_url: str, postgres_server: PostgresServer
) -> None:
    run_id = seed_pg(postgres_url, two_calls)
    with open_read_only(postgres_url).snapshot() as reader:
        run = reader.get_run(run_id)
        assert run is not None
        assert reader.usage(run) == {"input_tokens": 7, "cost": 1.75}
    _, schema, _ = split_schema(postgres_url)
    with postgres_server.admin() as conn:  # a row no zincir writer produces
        conn.execute(
            sql.SQL("UPDATE {} SET payload = %s WHERE run_id = %s AND seq = 3").format(
                sql.Identifier(schema, "events")
            ),
            ('{"usage": {"input_tokens": 2', run_id),
        )
    with open_read_only(postgres_url).snapshot() as reader:  # a new view: no cached totals
        run = reader.get_run(run_id)
        assert run is not None
        assert reader.usage(run) == {"input_tokens": 5, "cost": 1.5}
        assert reader.events(run_id)[2]["payload"] == '{"usage": {"input_tokens": 2'
        assert isinstance(reader.usage(run)["input_tokens"], int)


def test_a_schema_without_zincir_tables(
    postgres_url: str, postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    result = CliRunner().invoke(ui_command, ["--db", postgres_url])
    assert result.exit_code == 1 and "holds no zincir tables" in result.output
    with pytest.raises(zincir.NotAZincirDatabase, match="holds no zincir tables"):
        create_app(postgres_url, address=ADDRESS)
    assert contents(postgres_server, split_schema(postgres_url)[1]) == {}


def test_ui_serves_a_postgres_schema(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Any] = []
    monkeypatch.setattr(inspector_cli, "serve", lambda *args: served.append(args))
    result = CliRunner().invoke(ui_command, ["--db", pg.url])
    assert result.exit_code == 0, result.output
    ((view, _),) = served
    assert isinstance(view, ReadOnlyPostgres) and view.schema == pg.name


def test_a_newer_schema_is_a_409_page(postgres_url: str, postgres_server: PostgresServer) -> None:
    seed_pg(postgres_url, two_calls)
    _, schema, _ = split_schema(postgres_url)
    with postgres_server.admin() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (999, 'future', clock_timestamp())").format(
                sql.Identifier(schema, "schema_migrations")
            )
        )
    with pytest.raises(SchemaTooNew):
        open_read_only(postgres_url).check()
    client = TestClient(create_app(postgres_url, address=ADDRESS), base_url=BASE_URL)
    page = client.get("/")
    assert page.status_code == 409 and "newer than this zincir" in page.text


def test_a_server_that_is_down(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    down = f"postgresql://zincir@127.0.0.1:{free_port()}/zincir?connect_timeout=2"
    with pytest.raises(ConnectionLost, match="cannot connect"):
        create_app(down, address=ADDRESS)
    view = ReadOnlyPostgres(pg.url)
    client = TestClient(create_app(view, address=ADDRESS), base_url=BASE_URL)
    monkeypatch.setattr(view, "_conninfo", split_schema(down)[0])  # the server goes away
    page = client.get("/")
    assert page.status_code == 503 and "busy or unavailable" in page.text
    assert client.get("/api/runs").json()["status"] == 503


def test_a_connection_lost_mid_snapshot(pg: Schema, postgres_server: PostgresServer) -> None:
    with open_read_only(pg.url).snapshot() as reader:
        assert reader.list_runs()
        assert postgres_server.terminate_backends("zincir-readonly") == 1
        with pytest.raises(ConnectionLost, match="nothing was written"):
            reader.list_runs()
    assert issubclass(ConnectionLost, StoreUnavailable)
