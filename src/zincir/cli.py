"""The ``zincir`` command line: demo, runs, threads, approvals, migrate, prune, compact,
worker, check-compat, ui."""

from __future__ import annotations

import asyncio
import getpass
import importlib
import json
import sys
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ._cli_keys import keys, reencrypt_command
from ._cli_options import (
    Duration,
    Seconds,
    database_option,
    key_file_option,
    keys_from,
    read_only_database,
)
from ._cli_schedules import schedules
from ._errors import ApprovalMismatch, InvalidInput, RunNotFound, ZincirError
from ._json import StrictJsonError, loads_strict
from ._validate import check_id
from .runs._lifecycle import DEFAULT_BATCH_EVENTS
from .runs._worker_cli import worker_command
from .store import Store
from .store._readonly import ReadOnlyView

if TYPE_CHECKING:
    from .agent import Decision, PendingApproval

__all__ = ["main"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
MAX_LIST_LIMIT = 1_000_000
DIGEST_PREFIX = 12  # hex digits of an args sha256 that `approvals list` prints


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
    """List runs, show their event logs, cancel and fork them."""


def _existing(database: str, key_file: str | None = None) -> ReadOnlyView:
    """The read-only view of an existing zincir database (a SQLite file or a PostgreSQL
    schema); the read commands never create, migrate or write one (a missing, foreign or
    damaged database is a one-line error). ``key_file`` opens an encrypted one's payloads
    (else ``$ZINCIR_ENCRYPTION_KEYS``; without keys they show as sealed)."""
    return read_only_database(database, key_file)


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
@click.option(
    "--version",
    "app_version",
    metavar="VERSION",
    help="Only the runs of this application version (app_version).",
)
@click.option(
    "--stuck", is_flag=True, help="Only live runs without progress for --stuck-for, and why."
)
@click.option(
    "--stuck-for",
    "stuck_for",
    type=Duration(),
    default="1h",
    show_default=True,
    help="How long without a new event makes a live run stuck (with --stuck).",
)
@key_file_option
def runs_list(
    database: str,
    status: str | None,
    limit: int,
    app_version: str | None,
    stuck: bool,
    stuck_for: timedelta,
    key_file: str | None,
) -> None:
    """The latest runs, newest first, with the application version each runs on; with
    ``--stuck``, the live runs that made no progress lately and why each is not moving."""
    from .store._queues import snapshot_places
    from .store.report import format_runs, format_stuck_runs

    if app_version is not None:
        check_id(app_version, "--version")
    now = datetime.now(UTC)
    before = now - stuck_for if stuck else None
    with _existing(database, key_file).snapshot() as reader:
        found = reader.list_runs(status, limit, app_version=app_version, stuck_before=before)
        arrived = reader.arrived(found) if stuck else set()
        places = snapshot_places(reader, [run["id"] for run in found], now)
    click.echo(
        format_stuck_runs(found, now, arrived=arrived, places=places)
        if stuck
        else format_runs(found, places)
    )


@main.group()
def queues() -> None:
    """Durable queues: their limits and depth."""


@queues.command("list")
@database_option
@key_file_option
def queues_list(database: str, key_file: str | None) -> None:
    """Every queue with its limits, the runs waiting in it and the runs holding a slot."""
    from .store._queues import snapshot_depths
    from .store.report import format_queues

    with _existing(database, key_file).snapshot() as reader:
        click.echo(format_queues(snapshot_depths(reader)))


@runs.command("show")
@database_option
@click.argument("run_id")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run and its events, payloads whole, as JSON."
)
@key_file_option
def runs_show(database: str, run_id: str, as_json: bool, key_file: str | None) -> None:
    """A run's summary, output and event log (payloads of an encrypted database read with
    --key-file; without keys they show as sealed)."""
    from .store.report import format_run_log, run_document

    check_id(run_id, "RUN_ID")
    with _existing(database, key_file).snapshot() as reader:
        run = reader.get_run(run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in {reader.path}", run_id=run_id)
        if as_json:
            document = run_document(
                run,
                reader.iter_events(run_id),
                datetime.now(UTC),
                arrived=bool(reader.arrived([run])),
                sealed=reader.sealed,
            )
            click.echo(json.dumps(document, ensure_ascii=False, indent=2))
            return
        text = format_run_log(
            run,
            (
                (event["seq"], event["type"], event["payload"])
                for event in reader.iter_events(run_id)
            ),
            arrived=bool(reader.arrived([run])),
            sealed=reader.sealed,
        )
    click.echo(text)


def _batch_events(help_text: str) -> Callable[[F], F]:
    """``--batch-events N``: how many events one transaction of a bulk action handles."""
    return click.option(
        "--batch-events",
        type=click.IntRange(1, 1_000_000),
        default=DEFAULT_BATCH_EVENTS,
        show_default=True,
        help=help_text,
    )


@runs.command("cancel")
@database_option
@click.argument("run_id")
@click.option("--reason", help="Why; recorded in the run's state_transition.")
@click.option("--cascade", is_flag=True, help="Cancel every live descendant run too.")
def runs_cancel(database: str, run_id: str, reason: str | None, cascade: bool) -> None:
    """Cancel a live run: its owner stops at its next write and no worker claims it again."""
    from .runs import cancel_run

    check_id(run_id, "RUN_ID")
    cancelled = _with_store(
        database, lambda store: cancel_run(store, run_id, reason=reason, cascade=cascade)
    )
    if not cancelled:
        click.echo(f"run {run_id} was already cancelled; nothing changed")
        return
    for cancelled_id in cancelled:
        click.echo(f"cancelled {cancelled_id}")


def _fork_options(command: F) -> F:
    """The options of a fork: where it starts (one of the point options) and its new id."""
    options = (
        click.option(
            "--at-seq",
            "at_seq",
            type=int,
            help="Fork before this event: the new run holds the events with a smaller seq.",
        ),
        click.option(
            "--at-turn",
            "at_turn",
            type=int,
            help="Fork an agent run before model request K (0-based): the new run holds the "
            "turns before it.",
        ),
        click.option("--new-id", "new_id", help="The new run's id (default: RUN-fork-<hex>)."),
    )
    for option in reversed(options):
        command = option(command)
    return command


@runs.command("fork")
@database_option
@click.argument("run_id")
@_fork_options
def runs_fork(
    database: str, run_id: str, at_seq: int | None, at_turn: int | None, new_id: str | None
) -> None:
    """Fork a run: a new run holding its history before a point, which the next resume
    continues live; the source is untouched. Prints the new run's id."""
    from .agent._fork import fork_agent_run
    from .runs import fork_run

    check_id(run_id, "RUN_ID")
    if (at_seq is None) == (at_turn is None):
        raise click.UsageError("say where the fork starts: --at-turn K or --at-seq N (one)")
    if at_turn is not None:
        turn = at_turn
        forked = _with_store(
            database, lambda store: fork_agent_run(store, run_id, at_turn=turn, run_id=new_id)
        )
    else:
        seq = at_seq
        assert seq is not None
        forked = _with_store(
            database, lambda store: fork_run(store, run_id, at_seq=seq, run_id=new_id)
        )
    click.echo(forked)


@runs.command("rewind")
@database_option
@click.argument("run_id")
@click.option(
    "--at-turn",
    "at_turn",
    type=int,
    required=True,
    help="Fork the agent run before model request K (0-based), then cancel it.",
)
@click.option("--new-id", "new_id", help="The new run's id (default: AGENT-<hex>).")
def runs_rewind(database: str, run_id: str, at_turn: int, new_id: str | None) -> None:
    """Rewind an agent run: fork it before a turn and cancel it, the reason naming the
    fork. Prints the new run's id."""
    from .agent._fork import rewind_agent_run

    check_id(run_id, "RUN_ID")
    forked = _with_store(
        database, lambda store: rewind_agent_run(store, run_id, at_turn=at_turn, run_id=new_id)
    )
    click.echo(forked)


@main.command("prune")
@database_option
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    required=True,
    help="Delete runs last updated longer ago than this (30d, 12h, 90m, 45s).",
)
@click.option(
    "--status",
    "statuses",
    default="completed,failed,cancelled",
    show_default=True,
    help="Comma-separated terminal statuses to delete.",
)
@_batch_events("Events deleted per transaction (other writers wait at most about that long).")
def prune(database: str, older_than: timedelta, statuses: str, batch_events: int) -> None:
    """Delete old terminal runs with every row they own; live and paused runs are kept."""
    from .runs import prune_runs

    report = _with_store(
        database,
        lambda store: prune_runs(
            store, older_than=older_than, statuses=statuses.split(","), batch_events=batch_events
        ),
    )
    click.echo(
        f"pruned {report.runs} runs ({report.events} events) in {report.batches} "
        f"transactions; the longest held the database {report.longest_batch_ms:.1f} ms"
    )


@main.command("compact")
@database_option
@click.argument("run_id")
@_batch_events("Events moved per transaction.")
def compact(database: str, run_id: str, batch_events: int) -> None:
    """Move a run's events before its latest accepted checkpoint to the archive."""
    from .runs import compact_run

    check_id(run_id, "RUN_ID")
    report = _with_store(
        database, lambda store: compact_run(store, run_id, batch_events=batch_events)
    )
    deltas = (
        f"; dropped {report.stream_deltas} stream deltas of answered model requests"
        if report.stream_deltas
        else ""
    )
    if report.through_seq == 0:
        click.echo(f"run {run_id} has no accepted checkpoint; no event was archived{deltas}")
        return
    click.echo(
        f"archived {report.archived} events of run {run_id} through seq {report.through_seq} "
        f"in {report.batches} transactions ({report.kept} open tool intents kept live){deltas}"
    )


@main.group()
def threads() -> None:
    """List LangGraph threads (checkpoints of zincir's saver) and show one."""


THREAD_ROWS = 500  # checkpoints and pending writes `threads show` prints, like the inspector


def _printable(value: Any) -> str:
    """Stored text for a terminal: control characters escaped, never sent raw."""
    text = str(value)
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell (the last one left as it is)."""
    table = [header, *(tuple(_printable(cell) for cell in row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in table
    ).rstrip()


def _lease_text(row: Mapping[str, Any]) -> str:
    """A thread's lease: its owner, expiry and fencing token, or none."""
    if row["lease_owner"] is None:
        return "none" if row["lease_token"] is None else f"none (token {row['lease_token']})"
    return f"{row['lease_owner']} until {row['lease_expires_at']} (token {row['lease_token']})"


def _cut(text: str, width: int = 60) -> str:
    """Text on one line, cut at ``width`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _one_line(value: Any) -> str:
    """A decoded value as compact JSON on one line, cut."""
    return _cut(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def _value_text(row: Mapping[str, Any]) -> str:
    """A stored value as one line: its JSON when the reader decoded it, else its type and
    size (msgpack, bytes and the like are never decoded)."""
    if row["preview_kind"] == "json":
        return _one_line(row["preview"])
    if row["preview_kind"] == "text":
        return _cut(f"<json, {row['size']:,} B, first bytes as text> {row['preview']}")
    return f"<{row['type']}, {row['size']:,} B, not decoded>"


def _ns(value: str) -> str:
    """A checkpoint namespace by name; the root graph's is empty."""
    return value or "(root)"


@threads.command("list")
@database_option
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIST_LIMIT),
    default=100,
    show_default=True,
    help="Show at most this many threads.",
)
@key_file_option
def threads_list(database: str, limit: int, key_file: str | None) -> None:
    """The LangGraph threads, most recently checkpointed first."""
    with _existing(database, key_file).snapshot() as reader:
        found = reader.threads(limit)
    if not found:
        click.echo("no threads")
        return
    header = ("thread id", "checkpoints", "pending", "latest checkpoint", "at", "lease")
    click.echo(
        _table(
            header,
            [
                (
                    row["thread_id"],
                    str(row["checkpoints"]),
                    str(row["pending_writes"]),
                    row["latest_checkpoint_id"],
                    row["latest_created_at"],
                    _lease_text(row),
                )
                for row in found
            ],
        )
    )


@threads.command("show")
@database_option
@click.argument("thread_id", metavar="THREAD")
@key_file_option
def threads_show(database: str, thread_id: str, key_file: str | None) -> None:
    """A thread's checkpoints (newest first) and the pending writes of each namespace's
    newest checkpoint; msgpack and other non-JSON values are never decoded."""
    check_id(thread_id, "THREAD")
    with _existing(database, key_file).snapshot() as reader:
        thread = reader.thread(thread_id)
        if thread is None:
            raise click.ClickException(f"no LangGraph thread {thread_id!r} in {reader.path}")
        checkpoints = reader.thread_checkpoints(thread_id, THREAD_ROWS)
        heads = [
            (
                head,
                reader.thread_writes(
                    thread_id, head["checkpoint_ns"], head["checkpoint_id"], THREAD_ROWS
                ),
            )
            for head in reader.thread_heads(thread_id)
        ]
    namespaces = ", ".join(_ns(ns) for ns in thread["namespaces"])
    lines = [
        f"thread       {_printable(thread_id)}",
        f"checkpoints  {thread['checkpoints']} in {thread['namespace_count']} namespace(s): "
        + _printable(namespaces),
        f"latest       {_printable(thread['latest_checkpoint_id'])} in "
        f"{_printable(_ns(thread['latest_checkpoint_ns']))} at {thread['latest_created_at']}, "
        f"{thread['pending_writes']} pending write(s)",
        f"lease        {_printable(_lease_text(thread))}",
        "",
        "checkpoints, newest first"
        + (
            f" (the newest {THREAD_ROWS} of {thread['checkpoints']})"
            if len(checkpoints) >= THREAD_ROWS
            else ""
        ),
        _table(
            (
                "namespace",
                "checkpoint id",
                "parent",
                "type",
                "bytes",
                "writes",
                "created",
                "metadata",
            ),
            [
                (
                    _ns(row["checkpoint_ns"]),
                    row["checkpoint_id"],
                    row["parent_checkpoint_id"] or "-",
                    row["type"],
                    str(row["size"]),
                    str(row["writes"]),
                    row["created_at"],
                    _one_line(row["metadata"]),
                )
                for row in checkpoints
            ],
        ),
    ]
    for head, writes in heads:
        lines += [
            "",
            f"newest checkpoint of {_printable(_ns(head['checkpoint_ns']))}: "
            f"{_printable(head['checkpoint_id'])}",
            f"value  {_printable(_value_text(head))}",
            "its pending writes:",
            _table(
                ("task id", "idx", "channel", "type", "bytes", "value"),
                [
                    (
                        row["task_id"],
                        str(row["idx"]),
                        row["channel"],
                        row["type"],
                        str(row["size"]),
                        _value_text(row),
                    )
                    for row in writes
                ],
            )
            if writes
            else "none",
        ]
    click.echo("\n".join(lines))


@main.group()
def approvals() -> None:
    """List the paused calls waiting for a person's decision, and decide them."""


def _with_store(
    database: str, work: Callable[[Store], Coroutine[Any, Any, T]], key_file: str | None = None
) -> T:
    """Run ``work`` on the existing database at ``--db``, opened for writing (a missing or
    foreign file is refused untouched: deciding never creates a database); ``key_file``
    holds an encrypted one's keys (else ``$ZINCIR_ENCRYPTION_KEYS``)."""
    from .store import open_store

    encryption = keys_from(key_file)
    read_only_database(database, key_file).check()
    store = open_store(database, encryption=encryption)
    try:
        return asyncio.run(work(store))
    finally:
        store.close_sync()


def _json_argument(text: str, what: str, *, object_only: bool = False) -> Any:
    """The strict JSON value of a command-line argument (InvalidInput: one line, exit 1)."""
    try:
        value = loads_strict(text)
    except StrictJsonError as error:
        raise InvalidInput(f"{what} is not JSON ({error}); quote a string as '\"text\"'") from None
    if object_only and not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _runs_with(item: PendingApproval) -> dict[str, Any]:
    """The arguments the call runs with: an approval's edited ones, else the model's."""
    decision = item.decision
    if decision is not None and decision.override_arguments is not None:
        return decision.override_arguments
    return item.arguments


def _decided(item: PendingApproval) -> tuple[str, str]:
    """An approval's decision in a word or two, and who made it ("-": not said)."""
    decision = item.decision
    if decision is None:
        word = "waiting"
    elif decision.decision == "approve":
        word = "approved" if decision.override_arguments is None else "approved-edited"
    else:
        word = {"deny": "denied", "external_result": "answered"}[decision.decision]
    return word, _printable(_cut(item.decided_by or "-", 24))


def _approvals_table(found: list[PendingApproval], *, decided: bool = False) -> str:
    """One line per waiting call: approval id, run, tool, short digest, since, expiry and
    the arguments it would run with (shortened); with ``decided``, also each decision and
    who made it (an approval with edited arguments shows those)."""
    if not found:
        return "no approvals" if decided else "no approvals waiting"
    header: tuple[str, ...] = (
        *("approval id", "run", "tool", "args sha256", "since", "expires"),
        *(("decision", "by") if decided else ()),
        "arguments",
    )
    lines = [
        (
            item.approval_id,
            item.run_id,
            item.tool,
            item.args_sha256[:DIGEST_PREFIX],
            _when(item.since),
            "EXPIRED"
            if item.expired
            else ("never" if item.expires_at is None else _when(item.expires_at)),
            *(_decided(item) if decided else ()),
            _printable(_cut(json.dumps(_runs_with(item), ensure_ascii=False), 48)),
        )
        for item in found
    ]
    widths = [max(len(row[i]) for row in (header, *lines)) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in (header, *lines)
    )


def _approvals_json(found: list[PendingApproval]) -> str:
    return json.dumps(
        [
            {
                "approval_id": item.approval_id,
                "run_id": item.run_id,
                "call_id": item.call_id,
                "tool": item.tool,
                "arguments": item.arguments,
                "args_sha256": item.args_sha256,
                "execution": item.execution,
                "sequence": item.sequence,
                "since": item.since.isoformat(),
                "expires_at": None if item.expires_at is None else item.expires_at.isoformat(),
                "expired": item.expired,
                "decision": None if item.decision is None else item.decision.decision,
                "edited_arguments": (
                    None if item.decision is None else item.decision.override_arguments
                ),
                "edited_args_sha256": item.edited_args_sha256,
                "decided_by": item.decided_by,
            }
            for item in found
        ],
        ensure_ascii=False,
        indent=2,
    )


@approvals.command("list")
@database_option
@click.option("--run", "run_id", metavar="RUN_ID", help="Only the approvals of this run.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array with every field.")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every approval, decided ones too, with its decision and who made it.",
)
@key_file_option
def approvals_list(
    database: str, run_id: str | None, as_json: bool, every: bool, key_file: str | None
) -> None:
    """Paused calls waiting for a decision (of live runs), oldest first."""
    from .agent import PendingApproval, pending_approvals

    if run_id is not None:
        check_id(run_id, "RUN_ID")

    async def every_approval(store: Store) -> list[PendingApproval]:
        rows = await store.list_approvals(run_id, pending=False)
        return [PendingApproval.from_row(row, store.now()) for row in rows]

    found = _with_store(
        database,
        every_approval if every else (lambda store: pending_approvals(store, run_id)),
        key_file,
    )
    click.echo(_approvals_json(found) if as_json else _approvals_table(found, decided=every))


def _hex_prefix(text: str, what: str) -> str:
    """A digest or the prefix of one that ``approvals list`` prints: at least
    DIGEST_PREFIX hex digits."""
    prefix = text.strip().lower()
    if not prefix or any(c not in "0123456789abcdef" for c in prefix) or len(prefix) > 64:
        raise InvalidInput(f"{what} must be a SHA-256 digest or its prefix in hex, not {text!r}")
    if len(prefix) < DIGEST_PREFIX:
        raise InvalidInput(
            f"{what} {text!r} is too short: give at least {DIGEST_PREFIX} hex digits, as "
            "`zincir approvals list` prints them"
        )
    return prefix


async def _approval_by_digest(store: Store, prefix: str) -> str:
    """The id of the one waiting approval whose arguments' digest starts with ``prefix``."""
    from .agent import pending_approvals

    found = [item for item in await pending_approvals(store) if item.args_sha256.startswith(prefix)]
    if not found:
        raise InvalidInput(
            f"no waiting approval has an args sha256 starting with {prefix}; run "
            "`zincir approvals list` to see the waiting ones"
        )
    if len(found) > 1:
        ids = ", ".join(item.approval_id for item in found)
        raise InvalidInput(
            f"the args sha256 prefix {prefix} matches {len(found)} waiting approvals ({ids}); "
            "pass the approval id instead"
        )
    return found[0].approval_id


async def _full_digest(store: Store, approval_id: str, prefix: str) -> str | None:
    """The approval's whole digest when ``prefix`` starts it (the decision checks it again
    as it is written); ApprovalMismatch when it does not."""
    row = await store.get_approval(approval_id)
    if row is None:
        return None  # the decision says there is no such approval
    if not row.args_sha256.startswith(prefix):
        raise ApprovalMismatch(
            f"approval {approval_id!r} binds arguments with sha256 {row.args_sha256}, not "
            f"{prefix}…; list the approvals again and decide on the arguments that would run",
            run_id=row.run_id,
        )
    return row.args_sha256


def _decide(
    database: str,
    approval_id: str,
    decision: Decision,
    args_sha256: str | None,
    done: str,
    decided_by: str | None = None,
    key_file: str | None = None,
) -> None:
    """Record ``decision`` once and say which run it wakes. ``approval_id`` may be the
    approval's id or its arguments' digest prefix, as ``approvals list`` prints it."""
    from .agent import decide

    by_digest = "/" not in approval_id and all(c in "0123456789abcdefABCDEF" for c in approval_id)
    prefix = None if args_sha256 is None else _hex_prefix(args_sha256, "--args-sha256")
    if by_digest:
        _hex_prefix(approval_id, "APPROVAL_ID, given as an args sha256 prefix,")

    async def work(store: Store) -> PendingApproval:
        found = await _approval_by_digest(store, approval_id.lower()) if by_digest else approval_id
        digest = None if prefix is None else await _full_digest(store, found, prefix)
        return await decide(store, found, decision, args_sha256=digest, decided_by=decided_by)

    decided = _with_store(database, work, key_file)
    click.echo(
        f"{done} {decided.approval_id}: {decided.tool} call {decided.call_id!r} of run "
        f"{decided.run_id}, which resumes with this decision"
    )


def _os_user() -> str | None:
    """The OS user running the command (who decided, unless ``--by`` says), or None."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


def _by_option(function: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--by",
        "decided_by",
        metavar="NAME",
        help="Who decides, recorded with the decision (default: the OS user).",
    )(function)


_ARGS_SHA256_HELP = (
    "Decide only if the call's arguments still have this SHA-256 (the digest or a prefix of "
    "at least 12 hex digits, as `zincir approvals list` prints it)."
)


@approvals.command("approve")
@database_option
@click.argument("approval_id")
@click.option("--args-sha256", "args_sha256", metavar="HEX", help=_ARGS_SHA256_HELP)
@click.option(
    "--arguments",
    "edited",
    metavar="JSON_OBJECT",
    help="Run the call with these edited arguments instead (checked against the tool's "
    "schema when the run resumes).",
)
@click.option("--override", metavar="JSON_OBJECT", help="The older name of --arguments.")
@_by_option
@key_file_option
def approvals_approve(
    database: str,
    approval_id: str,
    args_sha256: str | None,
    edited: str | None,
    override: str | None,
    decided_by: str | None,
    key_file: str | None,
) -> None:
    """Approve a paused call: its run resumes and runs it. APPROVAL_ID is the approval's id
    or the args sha256 prefix `approvals list` prints (at least 12 hex digits, unique)."""
    from .agent import Approve

    if edited is not None and override is not None:
        raise click.UsageError("give the edited arguments once: --arguments (or --override)")
    text, flag = (edited, "--arguments") if override is None else (override, "--override")
    arguments = None if text is None else _json_argument(text, flag, object_only=True)
    by = decided_by or _os_user()
    _decide(
        database, approval_id, Approve(arguments=arguments), args_sha256, "approved", by, key_file
    )


@approvals.command("deny")
@database_option
@click.argument("approval_id")
@click.option("--reason", default="", help="Why; the model is told.")
@_by_option
@key_file_option
def approvals_deny(
    database: str, approval_id: str, reason: str, decided_by: str | None, key_file: str | None
) -> None:
    """Deny a paused call: its run resumes without running it."""
    from .agent import Deny

    by = decided_by or _os_user()
    _decide(database, approval_id, Deny(reason), None, "denied", by, key_file)


@approvals.command("result")
@database_option
@click.argument("approval_id")
@click.argument("value", metavar="JSON_VALUE")
@click.option("--args-sha256", "args_sha256", metavar="HEX", help=_ARGS_SHA256_HELP)
@_by_option
@key_file_option
def approvals_result(
    database: str,
    approval_id: str,
    value: str,
    args_sha256: str | None,
    decided_by: str | None,
    key_file: str | None,
) -> None:
    """Supply the result (JSON_VALUE) of a call that waits for an external one."""
    from .agent import ExternalResult

    result = _json_argument(value, "JSON_VALUE")
    by = decided_by or _os_user()
    _decide(database, approval_id, ExternalResult(result), args_sha256, "answered", by, key_file)


main.add_command(worker_command)
main.add_command(keys)
main.add_command(reencrypt_command)
main.add_command(schedules)


@main.command("check-compat")
@click.argument("target")
@database_option
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="RUN_ID",
    help="Check only this run (repeat for several).",
)
@click.option(
    "--timeout",
    type=Seconds(0.001),
    default=60.0,
    show_default=True,
    help="Seconds each run's replay may take.",
)
def check_compat_command(
    target: str, database: str, run_ids: tuple[str, ...], timeout: float
) -> None:
    """Replay every unfinished run against the handler TARGET (module:function), as a
    ResumeWorker would run it, but with no side effect and no write: print per run
    compatible or where it diverges; exit 1 when any run diverges (or its replay fails)."""
    from .runs._compat import check_compat, format_reports
    from .runs._worker_cli import load_handler

    for run_id in run_ids:
        check_id(run_id, "--run")
    handler = load_handler(target)
    reports = asyncio.run(check_compat(database, handler, run_ids=run_ids or None, timeout=timeout))
    click.echo(format_reports(reports))
    if any(report.verdict != "compatible" for report in reports):
        sys.exit(1)


@main.command("ui")
@database_option
@key_file_option
@click.pass_context
def ui(ctx: click.Context, database: str, key_file: str | None) -> None:
    """Serve the read-only run inspector on http://127.0.0.1:8787 ($ZINCIR_UI_ADDRESS);
    --key-file shows an encrypted database's payloads decrypted."""
    try:
        from .inspector import ui_command
    except ImportError as error:
        raise click.ClickException(str(error)) from None
    ctx.invoke(ui_command, database=database, key_file=key_file)


def run() -> None:
    """Console entry point that turns zincir errors into a message and exit code 1."""
    try:
        main(standalone_mode=True)
    except ZincirError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
