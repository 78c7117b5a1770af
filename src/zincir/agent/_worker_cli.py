"""``zincir worker --agent module:attr``: serve agents with a Runner until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Iterable
from datetime import timedelta

import click

from .._errors import ZincirError
from .._target import import_target
from ..store import open_store
from ._agent import Agent
from ._runner import Runner

__all__ = ["load_agents", "serve_agents"]


def load_agents(targets: Iterable[str]) -> list[Agent]:
    """Import each ``module:attr`` (an Agent, or a list of Agents) and return the agents."""
    agents: list[Agent] = []
    for target in targets:
        found = import_target(target, example="myapp.agents:weather")
        if isinstance(found, Agent):
            agents.append(found)
        elif isinstance(found, list | tuple) and found and all(isinstance(a, Agent) for a in found):
            agents.extend(found)
        else:
            raise click.BadParameter(
                f"{target!r} is a {type(found).__name__}, not a zincir.agent.Agent or a list "
                "of them",
                param_hint="--agent",
            )
    return agents


def serve_agents(
    targets: Iterable[str],
    database: str,
    *,
    lease_ttl: float,
    poll_interval: float,
    max_concurrency: int,
) -> None:
    """Build a Runner for the agents ``targets`` name and serve them until a signal."""
    agents = load_agents(targets)
    runner_log = logging.getLogger("zincir.runner")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    runner_log.addHandler(handler)
    runner_log.setLevel(logging.INFO)
    runner_log.propagate = False
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s", stream=sys.stderr)
    try:
        store = open_store(database)
    except ZincirError as error:
        raise click.ClickException(str(error)) from None
    try:
        runner = Runner(store, agents, lease_ttl=timedelta(seconds=lease_ttl))
    except ZincirError as error:
        store.close_sync()
        raise click.ClickException(str(error)) from None
    names = ", ".join(runner.agents)
    ready = (
        f"zincir worker: serving agents {names} on {store.path} "
        f"(max {max_concurrency} at once); stop with Ctrl-C"
    )
    try:
        asyncio.run(_serve(runner, poll_interval, max_concurrency, ready))
    finally:
        store.close_sync()
    click.echo("zincir worker: stopped", err=True)


async def _serve(runner: Runner, poll_interval: float, max_concurrency: int, ready: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    click.echo(ready, err=True)  # once a signal stops it cleanly
    try:
        await runner.serve(
            stop.wait(), poll_interval=poll_interval, max_concurrency=max_concurrency
        )
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
