"""``zincir schedules list|pause|resume|delete``: the schedules ``runner.schedule`` stored.

The database must exist and be zincir's (a missing or foreign file is refused untouched);
``--key-file`` holds an encrypted one's keys (else ``$ZINCIR_ENCRYPTION_KEYS``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

import click

from ._cli_options import database_option, key_file_option, keys_from, read_only_database
from ._errors import InvalidInput
from ._validate import check_id
from .store import Store

__all__ = ["schedules"]

T = TypeVar("T")


def _with_store(
    database: str, key_file: str | None, work: Callable[[Store], Coroutine[Any, Any, T]]
) -> T:
    from .store import open_store

    encryption = keys_from(key_file)
    read_only_database(database, key_file).check()
    store = open_store(database, encryption=encryption)
    try:
        return asyncio.run(work(store))
    finally:
        store.close_sync()


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@click.group("schedules")
def schedules() -> None:
    """List, pause, resume and delete the schedules runner.schedule stored."""


@schedules.command("list")
@database_option
@key_file_option
def schedules_list(database: str, key_file: str | None) -> None:
    """Every schedule: its state, cron expression, time zone, agent, and its last tick."""

    async def work(store: Store) -> None:
        found = await store.list_schedules()
        if not found:
            click.echo("no schedules")
            return
        header = ("NAME", "STATE", "CRON", "TIMEZONE", "AGENT", "MISSED", "LAST TICK", "LAST RUN")
        lines = [header] + [
            (
                record.name,
                "paused" if record.paused else "active",
                record.spec.cron,
                record.spec.timezone,
                record.spec.agent,
                record.spec.missed,
                _when(record.last_tick),
                record.last_run_id or "-",
            )
            for record in found
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        for line in lines:
            click.echo(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                ).rstrip()
            )

    _with_store(database, key_file, work)


def _unknown(name: str) -> InvalidInput:
    return InvalidInput(f"no schedule named {name!r}; `zincir schedules list` lists them")


def _pause(database: str, key_file: str | None, name: str, paused: bool) -> None:
    check_id(name, "a schedule name")
    changed = _with_store(database, key_file, lambda store: store.pause_schedule(name, paused))
    if changed is None:
        raise _unknown(name)
    word = "paused" if paused else "resumed"
    click.echo(f"{word} schedule {name}" if changed else f"schedule {name} was already {word}")


@schedules.command("pause")
@click.argument("name")
@database_option
@key_file_option
def schedules_pause(name: str, database: str, key_file: str | None) -> None:
    """Pause schedule NAME: no serving process starts its ticks until it is resumed."""
    _pause(database, key_file, name, True)


@schedules.command("resume")
@click.argument("name")
@database_option
@key_file_option
def schedules_resume(name: str, database: str, key_file: str | None) -> None:
    """Resume schedule NAME: its ticks after now start (those while paused never do)."""
    _pause(database, key_file, name, False)


@schedules.command("delete")
@click.argument("name")
@database_option
@key_file_option
def schedules_delete(name: str, database: str, key_file: str | None) -> None:
    """Delete schedule NAME (the runs it started stay); a runner declaring it again
    (runner.schedule) stores it anew."""
    check_id(name, "a schedule name")
    if not _with_store(database, key_file, lambda store: store.delete_schedule(name)):
        raise _unknown(name)
    click.echo(f"deleted schedule {name}")
