"""The ``zincir`` command line: demo, runs, migrate, worker, ui."""

from __future__ import annotations

import asyncio
import importlib
import sys
from typing import Any

import click

from ._cli_options import database_option, read_only_database
from ._errors import RunNotFound, ZincirError
from ._validate import check_id
from .runs._worker_cli import worker_command
from .store.sqlite import ReadOnlyDatabase

__all__ = ["main"]

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
MAX_LIST_LIMIT = 1_000_000


class _Commands(click.Group):
    """The CLI group; commands of an extra are imported only when they are called.

    A zincir error raised by any command is printed as one line (exit code 1), never as a
    traceback.
    """

    lazy = {"temporal-worker": ("zincir.temporal._cli", "temporal_worker_command")}

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ZincirError as error:
            raise click.ClickException(str(error)) from None

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
    @click.command(
        name, context_settings={"ignore_unknown_options": True}, help="Not available: " + reason
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def missing(args: tuple[str, ...]) -> None:
        raise click.ClickException(reason)

    return missing


@click.group(cls=_Commands)
@click.version_option(package_name="zincir")
def main() -> None:
    """zincir: durable, resumable execution for long-horizon AI agents."""


@main.command()
@database_option
@click.option(
    "--resume",
    is_flag=True,
    envvar="ZINCIR_RESUME",
    help="Finish pending or running runs instead of creating one.",
)
@click.option("--output-dir", envvar="ZINCIR_OUTPUT_DIR", default="output", show_default=True)
def demo(database: str, resume: bool, output_dir: str) -> None:
    """Run the reference durable agent (examples/durable_agent.py)."""
    from .demo import run_demo

    sys.exit(asyncio.run(run_demo(database, resume=resume, output_dir=output_dir)))


@main.command()
@database_option
def migrate(database: str) -> None:
    """Create the database if needed and apply every migration."""
    from .store import migrations, open_store

    store = open_store(database)
    store.close_sync()
    click.echo(f"{store.path}: schema version {migrations()[-1][0]}")


@main.group()
def runs() -> None:
    """List runs and show their event logs."""


def _existing(database: str) -> ReadOnlyDatabase:
    """The read-only view of an existing zincir database; the read commands never create,
    migrate or write one (a missing, foreign or damaged file is a one-line error)."""
    return read_only_database(database)


@runs.command("list")
@database_option
@click.option("--status", type=click.Choice(STATUSES))
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIST_LIMIT),
    default=100,
    show_default=True,
    help="Show at most this many runs.",
)
def runs_list(database: str, status: str | None, limit: int) -> None:
    """The latest runs, newest first."""
    from .store.report import format_runs

    with _existing(database).snapshot() as reader:
        text = format_runs(reader.list_runs(status, limit))
    click.echo(text)


@runs.command("show")
@database_option
@click.argument("run_id")
def runs_show(database: str, run_id: str) -> None:
    """A run's summary and event log."""
    from .store.report import format_run_log

    check_id(run_id, "RUN_ID")
    with _existing(database).snapshot() as reader:
        run = reader.get_run(run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in {reader.path}", run_id=run_id)
        text = format_run_log(
            run,
            (
                (event["seq"], event["type"], event["payload"])
                for event in reader.iter_events(run_id)
            ),
        )
    click.echo(text)


main.add_command(worker_command)


@main.command("ui")
@database_option
@click.pass_context
def ui(ctx: click.Context, database: str) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787 ($ZINCIR_UI_ADDRESS)."""
    try:
        from .inspector import ui_command
    except ImportError as error:
        raise click.ClickException(str(error)) from None
    ctx.invoke(ui_command, database=database)


def run() -> None:
    """Console entry point that turns zincir errors into a message and exit code 1."""
    try:
        main(standalone_mode=True)
    except ZincirError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
