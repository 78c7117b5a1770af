"""The command line: runs list/show, migrate, demo, and every command documented."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from tests.conftest import REPO
from zincir.cli import main


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_demo_then_runs_list_and_show(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    code, output = invoke("demo", "--db", db, "--output-dir", str(tmp_path / "out"))
    assert code == 0, output
    run_id = re.search(r"created run ([0-9a-f-]{36})", output)
    assert run_id is not None
    code, listing = invoke("runs", "list", "--db", db)
    assert code == 0 and run_id.group(1) in listing and "completed" in listing
    code, shown = invoke("runs", "show", run_id.group(1), "--db", db)
    assert code == 0
    assert "checkpoint_accepted" in shown and "tool_result" in shown
    code, missing = invoke("runs", "show", "no-such-run", "--db", db)
    assert code != 0 and "no-such-run" in missing


def test_runs_list_refuses_missing_database(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    code, output = invoke("runs", "list", "--db", str(db))
    assert code != 0 and "zincir demo" in output
    assert not db.exists()


def test_runs_list_leaves_a_foreign_database_alone(tmp_path: Path) -> None:
    import apsw

    db = tmp_path / "other.db"
    conn = apsw.Connection(str(db))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = db.read_bytes()
    code, output = invoke("runs", "list", "--db", str(db))
    assert code != 0 and "no zincir schema" in output
    assert db.read_bytes() == before


def test_migrate_creates_schema(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    code, output = invoke("migrate", "--db", str(db))
    assert code == 0 and "schema version" in output
    assert db.exists()


def _commands(group: click.Group, prefix: str = "zincir") -> list[str]:
    names = []
    context = click.Context(group)
    for name in group.list_commands(context):
        names.append(f"{prefix} {name}")
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            names.extend(_commands(command, f"{prefix} {name}"))
    return names


def test_every_command_is_documented() -> None:
    """docs/operations/cli.md names every command, and every option of each."""
    page = (REPO / "docs" / "operations" / "cli.md").read_text()
    missing = [name for name in _commands(main) if f"`{name}" not in page]
    context = click.Context(main)
    for name in _commands(main):
        command: click.Command | None = main
        for part in name.split()[1:]:
            assert isinstance(command, click.Group)
            command = command.get_command(context, part)
        assert command is not None
        flags = [
            flag
            for param in command.params
            if isinstance(param, click.Option)
            for flag in (*param.opts, *param.secondary_opts)
            if flag.startswith("--")
        ]
        missing += [f"{name} {flag}" for flag in flags if f"`{flag}" not in page]
    assert missing == []
