"""CommandHandler: the stdin/stdout protocol and every failure path, with a real program."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import count
from zincir import DigestMismatch, InputDrift, InvalidInput, SQLiteStore
from zincir.contract import (
    Failure,
    Invocation,
    OperationKind,
    Success,
    Suspended,
    SuspendReason,
)
from zincir.durable import CommandHandler, HandlerRegistry, LocalRuntime, RetryPolicy

WORKER = str(Path(__file__).with_name("command_worker.py"))


def command(*extra: str, **options: Any) -> CommandHandler:
    return CommandHandler([sys.executable, WORKER, *extra], **options)


def invocation(mode: str, sequence: int = 0, **request: Any) -> Invocation:
    return Invocation(
        "cmd-run",
        "tool.call",
        sequence,
        OperationKind.TOOL_CALL,
        "cmd-tools",
        json.dumps({"mode": mode, **request}),
    )


async def run(mode: str, handler: CommandHandler | None = None, **request: Any) -> Any:
    inv = invocation(mode, **request)
    return await (handler or command())(inv, json.loads(inv.input_json))


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


async def test_stdin_is_the_invocation_and_stdout_the_output_document(tmp_path: Path) -> None:
    handler = command(cwd=tmp_path, env={**os.environ, "WORKER_LABEL": "w1"})
    inv = invocation("echo")
    outcome = await handler(inv, None)
    assert isinstance(outcome, Success)
    output = json.loads(outcome.output_json)
    assert output == {"received": inv.to_dict(), "cwd": str(tmp_path), "env": "w1"}
    assert outcome.output_json == outcome.output_json.strip()  # the trailing newline is dropped


@pytest.mark.parametrize(
    "outcome",
    [
        Success('{"charged":12}'),
        Failure("CardDeclined", False, "insufficient funds"),
        Suspended("approval", 2, '{"ask":"refund?"}'),
    ],
)
async def test_a_printed_record_gives_its_outcome(outcome: Any) -> None:
    wire = {
        Success: lambda o: {"success": {"output_json": o.output_json}},
        Failure: lambda o: {
            "failure": {"error": o.error, "retryable": o.retryable, "message": o.message}
        },
        Suspended: lambda o: {
            "suspended": {
                "reason": str(o.reason),
                "state_version": o.state_version,
                "state_json": o.state_json,
            }
        },
    }[type(outcome)](outcome)
    assert await run("record", outcome=wire) == outcome


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("record_other", DigestMismatch),
        ("record_drift", InputDrift),
        ("record_bad_digest", DigestMismatch),
    ],
)
async def test_a_record_for_another_invocation_fails_closed(mode: str, error: type) -> None:
    with pytest.raises(error):
        await run(mode)


@pytest.mark.parametrize(
    ("mode", "request_", "error", "retryable", "in_message"),
    [
        ("exit", {"code": 3}, "CommandExited", True, "exited with status 3"),
        ("exit", {"code": 1}, "CommandExited", True, "something broke"),
        ("signal", {}, "CommandExited", True, "killed by signal 9"),
        ("garbage", {}, "CommandOutputInvalid", False, "one JSON document"),
        ("empty", {}, "CommandOutputInvalid", False, "one JSON document"),
        ("two_docs", {}, "CommandOutputInvalid", False, "one JSON document"),
        ("not_utf8", {}, "CommandOutputInvalid", False, "utf-8"),
        ("record_unknown_field", {}, "CommandOutputInvalid", False, "signature"),
        ("huge", {"size": 5000}, "CommandOutputTooLarge", False, "more than 1024 bytes"),
    ],
)
async def test_failures_are_named_and_carry_stderr(
    mode: str, request_: dict[str, Any], error: str, retryable: bool, in_message: str
) -> None:
    outcome = await run(mode, command(max_output_bytes=1024), **request_)
    assert isinstance(outcome, Failure)
    assert (outcome.error, outcome.retryable) == (error, retryable)
    assert in_message in outcome.message
    assert outcome.message.startswith(sys.executable)


async def test_only_the_tail_of_stderr_is_kept() -> None:
    outcome = await run("exit", stderr_bytes=100_000)
    assert isinstance(outcome, Failure)
    assert outcome.message.endswith("something broke")
    assert len(outcome.message) < 2200


async def test_huge_output_within_the_bound_is_accepted() -> None:
    outcome = await run("huge", size=2_000_000)
    assert isinstance(outcome, Success) and len(outcome.output_json) == 2_000_002


async def test_a_timeout_kills_the_program_and_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    outcome = await run(
        "sleep", command(timeout=timedelta(milliseconds=700)), pid_file=str(pid_file)
    )
    assert time.monotonic() - started < 5
    assert isinstance(outcome, Failure)
    assert (outcome.error, outcome.retryable) == ("CommandTimedOut", True)
    assert "0.7s" in outcome.message and "going to sleep" in outcome.message
    pids = [int(pid) for pid in pid_file.read_text().split()]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(alive(pid) for pid in pids), "the program and its child must be killed"


async def test_a_program_that_ignores_stdin_is_fine() -> None:
    inv = Invocation(
        "cmd-run",
        "tool.call",
        0,
        OperationKind.TOOL_CALL,
        "cmd-tools",
        json.dumps({"blob": "z" * 900_000}),
    )
    assert await command("no_read")(inv, None) == Success('{"ok":true}')


async def test_a_missing_program_is_a_failure(tmp_path: Path) -> None:
    outcome = await CommandHandler([str(tmp_path / "no-such-program")])(invocation("echo"), None)
    assert isinstance(outcome, Failure)
    assert (outcome.error, outcome.retryable) == ("CommandStartFailed", False)


def test_bad_arguments_are_rejected() -> None:
    for argv in ["python worker.py", [], [sys.executable, 3]]:
        with pytest.raises(InvalidInput):
            CommandHandler(argv)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        CommandHandler([sys.executable], timeout=0)
    with pytest.raises(InvalidInput):
        CommandHandler([sys.executable], max_output_bytes=0)
    assert CommandHandler([sys.executable, WORKER], 5).timeout == timedelta(seconds=5)


async def test_as_a_registered_handler_of_the_local_runtime(
    store: SQLiteStore, db_path: Path
) -> None:
    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, "cmd-tools", command())
    runtime = LocalRuntime(
        store, registry, RetryPolicy(max_attempts=2, initial_interval=timedelta(0))
    )
    echoed = await runtime.execute(invocation("echo", sequence=0))
    assert json.loads(echoed.outcome.output_json)["received"]["sequence"] == 0  # type: ignore[union-attr]
    suspended = await runtime.execute(
        invocation(
            "record",
            sequence=1,
            outcome={
                "suspended": {"reason": "external_tool", "state_version": 1, "state_json": "{}"}
            },
        )
    )
    assert suspended.outcome == Suspended(SuspendReason.EXTERNAL_TOOL, 1, "{}")
    exited = await runtime.execute(invocation("exit", sequence=2))
    assert isinstance(exited.outcome, Failure) and exited.outcome.error == "CommandExited"
    assert count(db_path, "operations") == 3
    with pytest.raises(DigestMismatch):
        await runtime.execute(invocation("record_other", sequence=3))
    assert count(db_path, "operations") == 3  # the refused answer stored nothing
    assert await runtime.execute(invocation("echo", sequence=0)) == echoed
