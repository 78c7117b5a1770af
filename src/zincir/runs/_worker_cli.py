"""``zincir worker module:function``: run a ResumeWorker until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from datetime import timedelta
from typing import cast

import click

from .._cli_options import Seconds, database_option
from .._errors import ZincirError
from .._target import import_target
from .._validate import DEFAULT_POLL_INTERVAL, MAX_COUNT
from ..store import open_store
from ._versions import VersionMigrations
from ._worker import Handler, ResumeWorker

__all__ = ["load_handler", "load_migrations", "worker_command"]


def load_handler(target: str) -> Handler:
    """Import ``module:function`` (the current folder is importable) and return the function."""
    handler = import_target(target, example="myapp.agents:resume")
    if not callable(handler):
        raise click.BadParameter(f"{target!r} is not callable", param_hint="TARGET")
    return cast(Handler, handler)


def load_migrations(target: str) -> VersionMigrations:
    """Import ``module:name`` and return the VersionMigrations registry it names."""
    found = import_target(target, example="myapp.versions:migrations")
    if not isinstance(found, VersionMigrations):
        raise click.BadParameter(
            f"{target!r} is a {type(found).__name__}, not a zincir.VersionMigrations",
            param_hint="--migrations",
        )
    return found


async def _serve(worker: ResumeWorker, handler: Handler) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await worker.run(handler, stop.wait())
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@click.command("worker")
@click.argument("target", required=False)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="MODULE:ATTR",
    help="Serve this zincir.agent.Agent (or list of Agents) with a Runner; repeatable. "
    "Its unfinished runs are resumed from their stored prompts.",
)
@database_option
@click.option(
    "--lease-ttl",
    type=Seconds(0.03),
    default=30.0,
    show_default=True,
    help="Lease of each claimed run, in seconds.",
)
@click.option(
    "--poll-interval",
    type=Seconds(0.001),
    default=DEFAULT_POLL_INTERVAL.total_seconds(),
    show_default=True,
    help="Seconds between polls when nothing is claimable.",
)
@click.option(
    "--max-concurrency",
    type=click.IntRange(1, MAX_COUNT),
    default=10,
    show_default=True,
    help="Handlers running at once.",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, MAX_COUNT),
    default=None,
    help="Mark a run failed after this many unfinished attempts (default: no limit).",
)
@click.option(
    "--app-version",
    metavar="VERSION",
    default=None,
    help="The version of the code this worker runs (default: $ZINCIR_APP_VERSION).",
)
@click.option(
    "--pin-version",
    is_flag=True,
    help="Claim only runs of --app-version (and those --migrations moves to it).",
)
@click.option(
    "--migrations",
    "migrations_target",
    metavar="MODULE:NAME",
    default=None,
    help="A VersionMigrations registry: runs of older versions are migrated when claimed.",
)
def worker_command(
    target: str | None,
    agents: tuple[str, ...],
    database: str,
    lease_ttl: float,
    poll_interval: float,
    max_concurrency: int,
    max_attempts: int | None,
    app_version: str | None,
    pin_version: bool,
    migrations_target: str | None,
) -> None:
    """Resume abandoned and due runs with the async handler TARGET (module:function), or
    serve the agents named by --agent.

    The handler receives an owned AgentContext and must complete() or close() it. With
    --agent, every unfinished run of those agents is resumed from its stored prompt, one
    line printed per run resumed and finished. Runs until SIGINT or SIGTERM, then waits
    for the runs in flight.
    """
    if (target is None) == (not agents):
        raise click.UsageError("give a handler TARGET (module:function) or --agent MODULE:ATTR")
    if agents:
        if (
            max_attempts is not None
            or app_version is not None
            or pin_version
            or migrations_target is not None
        ):
            raise click.UsageError(
                "--max-attempts, --app-version, --pin-version and --migrations apply to a "
                "TARGET handler, not to --agent"
            )
        from ..agent._worker_cli import serve_agents

        serve_agents(
            agents,
            database,
            lease_ttl=lease_ttl,
            poll_interval=poll_interval,
            max_concurrency=max_concurrency,
        )
        return
    assert target is not None
    handler = load_handler(target)
    migrations = None if migrations_target is None else load_migrations(migrations_target)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr
    )
    try:
        store = open_store(database)
    except ZincirError as error:
        raise click.ClickException(str(error)) from None
    try:
        worker = (
            ResumeWorker(
                store,
                timedelta(seconds=lease_ttl),
                max_attempts=max_attempts,
                app_version=app_version,
            )
            .poll_interval(poll_interval)
            .max_concurrency(max_concurrency)
            .migrate_with(migrations)
            .pin_version(pin_version)
        )
    except ZincirError as error:
        store.close_sync()
        raise click.ClickException(str(error)) from None
    served = worker.served_versions()
    versions = f"version {worker.app_version or '-'}" + (
        f", pinned to {', '.join(served)}" if served else ""
    )
    click.echo(
        f"zincir worker: serving {store.path} with {target} "
        f"(max {max_concurrency} at once, {versions}); stop with Ctrl-C",
        err=True,
    )
    try:
        asyncio.run(_serve(worker, handler))
    finally:
        store.close_sync()
    click.echo("zincir worker: stopped", err=True)
