"""The ``zincir`` command line: demo, runs, migrate, worker, ui."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys

import click

from ._errors import ZincirError
from .runs._worker_cli import worker_command

__all__ = ["main"]

DB_OPTION = click.option(
    "--db", "database", envvar="ZINCIR_DATABASE_PATH", default="zincir.db", show_default=True,
    help="SQLite database path (or $ZINCIR_DATABASE_PATH).",
)


class _Commands(click.Group):
    """The CLI group; commands of an extra are imported only when they are called."""

    lazy = {"temporal-worker": ("zincir.temporal._cli", "temporal_worker_command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.lazy:
            return super().get_command(ctx, name)
        module, attribute = self.lazy[name]
        try:
            command: click.Command = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            return _missing_extra(name, str(error))
        return command


def _missing_extra(name: str, reason: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True},
                   help="Not available: " + reason)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise click.ClickException(reason)

    return missing


@click.group(cls=_Commands)
@click.version_option(package_name="zincir")
def main() -> None:
    """zincir: durable, resumable execution for long-horizon AI agents."""


@main.command()
@DB_OPTION
@click.option("--resume", is_flag=True, envvar="ZINCIR_RESUME",
              help="Finish pending or running runs instead of creating one.")
@click.option("--output-dir", envvar="ZINCIR_OUTPUT_DIR", default="output", show_default=True)
def demo(database: str, resume: bool, output_dir: str) -> None:
    """Run the reference durable agent (examples/durable_agent.py)."""
    from .demo import run_demo

    sys.exit(asyncio.run(run_demo(database, resume=resume, output_dir=output_dir)))


@main.command()
@DB_OPTION
def migrate(database: str) -> None:
    """Create the database if needed and apply every migration."""
    from .store import migrations, open_store

    store = open_store(database)
    store.close_sync()
    click.echo(f"{os.path.abspath(database)}: schema version {migrations()[-1][0]}")


@main.group()
def runs() -> None:
    """List runs and show their event logs."""


def _existing(database: str) -> str:
    """A path to an existing zincir database; the read commands never create or migrate one."""
    import apsw

    if not os.path.exists(database):
        raise click.ClickException(
            f"no database at {database}; run `zincir demo` or your application first"
        )
    try:
        conn = apsw.Connection(database, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
            ).fetchone()
        finally:
            conn.close()
    except apsw.Error as error:
        raise click.ClickException(f"{database} is not a readable SQLite file: {error}") from None
    if found is None:
        raise click.ClickException(
            f"{database} holds no zincir schema; run `zincir demo` or your application first"
        )
    return database


@runs.command("list")
@DB_OPTION
@click.option("--status", type=click.Choice(["pending", "running", "completed", "failed",
                                             "cancelled"]))
@click.option("--limit", default=100, show_default=True)
def runs_list(database: str, status: str | None, limit: int) -> None:
    """The latest runs, newest first."""
    from .store import open_store
    from .store.report import format_runs

    async def show() -> str:
        store = open_store(_existing(database))
        try:
            return format_runs(await store.list_runs(limit=limit, status=status))
        finally:
            await store.close()

    click.echo(asyncio.run(show()))


@runs.command("show")
@DB_OPTION
@click.argument("run_id")
def runs_show(database: str, run_id: str) -> None:
    """A run's summary and event log."""
    from .store import open_store
    from .store.report import format_run

    async def show() -> str:
        store = open_store(_existing(database))
        try:
            return await format_run(store, run_id)
        finally:
            await store.close()

    try:
        click.echo(asyncio.run(show()))
    except ZincirError as error:
        raise click.ClickException(str(error)) from None


main.add_command(worker_command)


@main.command("ui")
@click.option("--db", "db_path", metavar="PATH", default=None,
              help="SQLite database (default $ZINCIR_DATABASE_PATH, else ./zincir.db).")
@click.pass_context
def ui(ctx: click.Context, db_path: str | None) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787 ($ZINCIR_UI_ADDRESS)."""
    try:
        from .inspector import ui_command
    except ImportError as error:
        raise click.ClickException(str(error)) from None
    ctx.invoke(ui_command, db_path=db_path)


def run() -> None:
    """Console entry point that turns zincir errors into a message and exit code 1."""
    try:
        main(standalone_mode=True)
    except ZincirError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
