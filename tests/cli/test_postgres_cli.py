"""The read commands on a PostgreSQL schema (``--db postgresql://…``): runs and threads are
read in read-only transactions, and a schema that is not zincir's is refused untouched."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from click.testing import CliRunner

import zincir
from tests.postgres_server import PostgresServer, free_port, schema_name
from zincir.cli import main
from zincir.store.postgres import split_schema


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def tables(server: PostgresServer, url: str) -> list[str]:
    """The tables of the URL's schema (none when it is empty or missing)."""
    _, schema, _ = split_schema(url)
    with server.admin() as conn:
        return [
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (schema,),
            )
        ]


def schema_exists(server: PostgresServer, schema: str) -> bool:
    with server.admin() as conn:
        return (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            is not None
        )


def with_query(url: str, **params: str) -> str:
    """``url`` with these query parameters added (or replaced)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


async def seed(url: str) -> tuple[str, str]:
    """A completed run with a tool call and a failed run, through AgentContext."""
    store = zincir.open_store(url)
    try:
        done = await zincir.AgentContext.create(store, name="research-agent", config={"n": 1})
        await done.record_response(
            "writing", [{"id": "call_1", "name": "write_file", "arguments": {}}], "tool_use"
        )
        await done.record_tool_result("call_1", {"written": True})
        await done.complete({"summary": "ok"})
        failed = await zincir.AgentContext.create(store, name="crawler", config={})
        await failed.fail("RateLimited")
        return done.run_id, failed.run_id
    finally:
        await store.close()


def test_runs_list_and_show(postgres_url: str) -> None:
    done, failed = asyncio.run(seed(postgres_url))
    code, listing = invoke("runs", "list", "--db", postgres_url)
    assert code == 0, listing
    assert done in listing and failed in listing
    assert "research-agent" in listing and "completed" in listing and "failed" in listing
    code, only_failed = invoke("runs", "list", "--status", "failed", "--db", postgres_url)
    assert code == 0 and failed in only_failed and done not in only_failed
    code, shown = invoke("runs", "show", done, "--db", postgres_url)
    assert code == 0, shown
    for kind in ("state_transition", "llm_call", "tool_call", "tool_result"):
        assert kind in shown
    assert f"run       {done}" in shown
    code, missing = invoke("runs", "show", "no-such-run", "--db", postgres_url)
    assert code == 1 and "no run 'no-such-run'" in missing
    assert "?schema=" in missing  # the schema's printable name


def test_a_schema_without_zincir_tables_is_refused_and_left_empty(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    for command in (("runs", "list"), ("runs", "show", "x"), ("threads", "list")):
        code, output = invoke(*command, "--db", postgres_url)
        assert code == 1, (command, output)
        assert "holds no zincir tables" in output and "zincir migrate" in output
        assert "Traceback" not in output
    code, output = invoke("approvals", "list", "--db", postgres_url)  # decides nothing either
    assert code == 1 and "holds no zincir tables" in output
    assert tables(postgres_server, postgres_url) == []


def test_a_missing_schema_is_not_created(postgres_server: PostgresServer) -> None:
    schema = schema_name("never_created", "0")
    url = with_query(postgres_server.url, schema=schema)
    code, output = invoke("runs", "list", "--db", url)
    assert code == 1 and "holds no zincir tables" in output and schema in output
    assert not schema_exists(postgres_server, schema)


def test_another_applications_schema_is_left_alone(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    _, schema, _ = split_schema(postgres_url)
    with postgres_server.admin() as conn:
        conn.execute(f"CREATE TABLE {schema}.notes (body text)")
        conn.execute(f"INSERT INTO {schema}.notes VALUES ('hello')")
    code, output = invoke("runs", "list", "--db", postgres_url)
    assert code == 1 and "another application's tables (notes)" in output
    assert tables(postgres_server, postgres_url) == ["notes"]


def test_a_newer_schema_is_refused(postgres_server: PostgresServer, postgres_url: str) -> None:
    asyncio.run(seed(postgres_url))
    _, schema, _ = split_schema(postgres_url)
    with postgres_server.admin() as conn:
        conn.execute(
            f"INSERT INTO {schema}.schema_migrations VALUES (999, 'future', clock_timestamp())"
        )
    code, output = invoke("runs", "list", "--db", postgres_url)
    assert code == 1 and "schema version 999, newer than this zincir's" in output


def test_a_server_that_is_down_is_a_one_line_error() -> None:
    url = f"postgresql://zincir@127.0.0.1:{free_port()}/zincir?connect_timeout=2"
    code, output = invoke("runs", "list", "--db", url)
    assert code == 1 and "cannot connect to postgresql://zincir@127.0.0.1" in output
    assert "Traceback" not in output


def test_threads_and_migrate_on_postgres(postgres_url: str) -> None:
    code, output = invoke("migrate", "--db", postgres_url)
    assert code == 0 and "schema version" in output
    assert invoke("threads", "list", "--db", postgres_url) == (0, "no threads\n")
    code, output = invoke("threads", "show", "nothing", "--db", postgres_url)
    assert code == 1 and "no LangGraph thread 'nothing'" in output
    assert invoke("runs", "list", "--db", postgres_url) == (0, "no runs\n")


def test_the_password_is_never_printed(postgres_server: PostgresServer, postgres_url: str) -> None:
    parts = urlsplit(postgres_url)
    url = urlunsplit(parts._replace(netloc=f"zincir:s3cret-pw@{parts.hostname}:{parts.port}"))
    code, output = invoke("runs", "list", "--db", url)  # trust auth: the password is unused
    assert code == 1 and "holds no zincir tables" in output
    assert "s3cret-pw" not in output


def test_approvals_list_on_postgres(postgres_url: str) -> None:
    asyncio.run(seed(postgres_url))
    assert invoke("approvals", "list", "--db", postgres_url) == (0, "no approvals waiting\n")


def test_demo_then_runs_list_and_show(postgres_url: str, tmp_path: Path) -> None:
    code, output = invoke("demo", "--db", postgres_url, "--output-dir", str(tmp_path / "out"))
    assert code == 0, output
    code, listing = invoke("runs", "list", "--db", postgres_url)
    # the demo prints to the stdout of its first import, so its run id is read from the list
    run_id = re.search(r"^([0-9a-f-]{36})  completed .* durable-demo$", listing, re.M)
    assert code == 0 and run_id is not None, listing
    code, shown = invoke("runs", "show", run_id.group(1), "--db", postgres_url)
    assert code == 0 and "checkpoint_accepted" in shown and "tool_result" in shown
