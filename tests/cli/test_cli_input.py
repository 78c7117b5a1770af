"""Bad input to the command line: one clear line and a non-zero exit, never a traceback.

Ids and paths that are not valid UTF-8 (the shell hands Python ``$'\\xff'`` as a lone
surrogate), limits past 64 bits, foreign files (another application's SQLite database,
random bytes) and the one ``--db`` option every command shares.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import zincir
from tests.conftest import REPO
from zincir._cli_options import DatabaseLocation
from zincir.cli import main

NOT_UTF8 = "\udcff"  # what Python makes of the byte 0xff in argv


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def zincir_cli(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("ZINCIR_DATABASE_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "zincir", *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_run(path: Path) -> str:
    async def main() -> str:
        store = zincir.open_store(path)
        try:
            ctx = await zincir.AgentContext.create(store, name="cli-input")
            await ctx.record_response("hello", [], "end_turn")
            await ctx.complete({"ok": True})
            return ctx.run_id
        finally:
            await store.close()

    return asyncio.run(main())


def assert_clean_error(code: int, output: str) -> None:
    """A non-zero exit with one ``Error:`` line (after click's usage lines, if any)."""
    assert code != 0, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("Error: ")] == lines[-1:], output
    assert all(line.startswith(("Usage: ", "Try ")) for line in lines[:-1]), output


# -- ids and paths that are not UTF-8 -----------------------------------------------------


def test_a_run_id_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "zincir.db"
    one_run(db)
    before = digest(db)
    code, output = invoke("runs", "show", NOT_UTF8, "--db", str(db))
    assert_clean_error(code, output)
    assert "RUN_ID" in output and "UTF-8" in output
    done = zincir_cli("runs", "show", b"\xff", "--db", str(db), cwd=tmp_path)
    assert done.returncode != 0 and b"Traceback" not in done.stderr
    assert b"UTF-8" in done.stderr
    assert digest(db) == before


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "list"],
        ["runs", "show", "some-run"],
        ["ui"],
        ["migrate"],
        ["demo"],
        ["worker", "json:loads"],
    ],
)
def test_a_database_path_that_is_not_utf8_is_a_clear_error(
    tmp_path: Path, command: list[str]
) -> None:
    db = tmp_path / "zincir.db"
    one_run(db)
    odd = os.fsencode(tmp_path) + b"/\xff.db"
    with open(odd, "wb") as file:  # the file exists: the path itself is the problem
        file.write(db.read_bytes())
    code, output = invoke(*command, "--db", os.fsdecode(odd))
    assert_clean_error(code, output)
    assert "not valid UTF-8" in output and "--db" in output
    done = zincir_cli(*command, "--db", odd, cwd=tmp_path)
    assert done.returncode != 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"not valid UTF-8" in done.stderr
    with open(odd, "rb") as file:
        assert file.read() == db.read_bytes()


@pytest.mark.parametrize("limit", [str(10**30), str(2**63), "0", "-1", "1000001", "1e3"])
def test_limit_out_of_range_is_a_usage_error(tmp_path: Path, limit: str) -> None:
    db = tmp_path / "zincir.db"
    one_run(db)
    code, output = invoke("runs", "list", "--db", str(db), "--limit", limit)
    assert code == 2 and "Traceback" not in output
    assert "--limit" in output


def test_limit_within_range_lists(tmp_path: Path) -> None:
    db = tmp_path / "zincir.db"
    run_id = one_run(db)
    for limit in ("1", "1000000"):
        code, output = invoke("runs", "list", "--db", str(db), "--limit", limit)
        assert code == 0 and run_id in output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e20", "1e400", "0", "-1", "x"])
@pytest.mark.parametrize(
    "command",
    [
        ["worker", "json:loads", "--lease-ttl"],
        ["worker", "json:loads", "--poll-interval"],
        ["temporal-worker", "json:loads", "--task-queue", "q", "--shutdown-grace"],
    ],
)
def test_durations_out_of_range_are_usage_errors(command: list[str], value: str) -> None:
    if command[0] == "temporal-worker":
        pytest.importorskip("temporalio", reason='temporal-worker needs the "temporal" extra')
        if value == "0":
            return  # no grace at all is a valid choice
    code, output = invoke(*command, value)
    assert code == 2 and "Traceback" not in output, output
    assert command[-1] in output


# -- files that are not zincir databases ------------------------------------------------


def app_database(path: Path) -> None:
    """Someone's app.db: SQLite with its own tables, including a schema_migrations."""
    import apsw

    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TEXT NOT NULL);"
        "INSERT INTO schema_migrations VALUES (1, 'create_users', '2024-01-01');"
        "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT);"
        "INSERT INTO users (email) VALUES ('a@example.com');"
    )
    conn.close()


def random_bytes(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 64)


@pytest.mark.parametrize("make", [app_database, random_bytes])
@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "show", "some-run"], ["ui"]])
def test_a_foreign_file_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object, command: list[str]
) -> None:
    from zincir.inspector import _cli as inspector_cli

    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    path = tmp_path / "app.db"
    assert callable(make)
    make(path)
    before = digest(path)
    code, output = invoke(*command, "--db", str(path))
    assert_clean_error(code, output)
    assert str(path) in output
    assert "no zincir schema" in output or "not an SQLite database" in output
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


@pytest.mark.parametrize(
    "command", [["runs", "list"], ["runs", "show", "some-run"], ["ui"], ["migrate"]]
)
def test_a_directory_given_as_the_database_is_named_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from zincir.inspector import _cli as inspector_cli

    monkeypatch.setattr(inspector_cli, "serve", lambda *a: pytest.fail("must not serve"))
    code, output = invoke(*command, "--db", f"{tmp_path}/")
    assert_clean_error(code, output)
    assert f"{tmp_path} is a directory" in output
    assert str(tmp_path / "zincir.db") in output
    assert list(tmp_path.iterdir()) == []


# -- one --db option ----------------------------------------------------------------------


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            found.extend(_commands(command))
        else:
            found.append(command)
    return found


def test_every_db_option_is_the_same_option() -> None:
    with_db = {}
    for command in _commands(main):
        for param in command.params:
            if "--db" in getattr(param, "opts", ()):
                with_db[command.name] = param
    assert {"demo", "migrate", "list", "show", "worker", "ui"} <= set(with_db)
    for name, param in with_db.items():
        assert isinstance(param.type, DatabaseLocation), name
        assert param.name == "database" and param.opts == ["--db"], name
        assert param.metavar == "PATH", name


def test_db_defaults_to_the_environment_then_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZINCIR_DATABASE_PATH", raising=False)
    elsewhere = tmp_path / "elsewhere.db"
    from_env = one_run(elsewhere)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, output = invoke("runs", "list", env={"ZINCIR_DATABASE_PATH": str(elsewhere)})
    assert code == 0 and from_env in output
    code, output = invoke("runs", "list")
    assert code != 0 and "zincir.db" in output and "zincir demo" in output
    assert list(here.iterdir()) == []  # reading never creates ./zincir.db
    local = one_run(here / "zincir.db")
    code, output = invoke("runs", "list")
    assert code == 0 and local in output and from_env not in output
    code, output = invoke("runs", "show", from_env, "--db", f"sqlite:///{elsewhere}")
    assert code == 0 and "cli-input" in output


def test_read_commands_leave_the_file_byte_identical(tmp_path: Path) -> None:
    db = tmp_path / "zincir.db"
    run_id = one_run(db)
    before = digest(db)
    for command in (["runs", "list"], ["runs", "show", run_id]):
        code, output = invoke(*command, "--db", str(db))
        assert code == 0 and run_id in output
    assert digest(db) == before
