"""The durable agent with its tool handler as a ``CommandHandler`` worker (a program per call)
next to an in-process model handler: the run completes, and a replay calls nothing."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reference import HANDLERS, build, lines, parallel, sequential
from tests.helpers import rows, seqs
from zincir.agent import Agent, DurableBinding, Handlers, serve
from zincir.contract import Invocation, OperationKind, Success
from zincir.contract.payloads import ModelRequest, ModelResponse
from zincir.store import OperationKey

WORKER = Path(__file__).with_name("command_tool_worker.py")
OUTPUT = "done: first=1 + second=2"
Script = Callable[[int, ModelRequest], ModelResponse]


def runtime(
    store: zincir.SQLiteStore,
    agent: Agent,
    log: Path,
    argv: list[str] | None = None,
    **options: Any,
) -> zincir.LocalRuntime:
    """A LocalRuntime: the agent's model served in-process, its tools by the command."""
    registry = zincir.HandlerRegistry()
    serve(registry, agent, Handlers(model_request=HANDLERS.model_request))
    command = zincir.CommandHandler(argv or [sys.executable, str(WORKER), str(log)], timeout=60)
    assert HANDLERS.tool_call is not None
    registry.register(OperationKind.TOOL_CALL, HANDLERS.tool_call, command)
    return zincir.LocalRuntime(store, registry, **options)


@pytest.mark.parametrize(
    ("script", "tool_lines"),
    [
        (sequential, ["command first 1 tool.call#0", "command second 2 tool.call#1000"]),
        (parallel, ["command first 1 tool.call#0", "command second 2 tool.call#1"]),
    ],
    ids=["sequential", "parallel"],
)
async def test_a_command_worker_serves_the_tools_and_a_replay_calls_nothing(
    tmp_path: Path, script: Script, tool_lines: list[str]
) -> None:
    db, log = tmp_path / "x.db", tmp_path / "log"
    store = zincir.open_store(db)
    try:
        agent = build(log, script=script)
        binding = DurableBinding(runtime(store, agent, log), "cmd-run", HANDLERS)
        result = await agent.run("Use both tools.", durable=binding)
        assert result.output == OUTPUT
        written = lines(log)
        # The model ran in-process; the tools only in the command (never "tool first 1").
        assert sorted(line for line in written if line.startswith("command")) == tool_lines
        assert not any(line.startswith("tool ") for line in written)
        models = [line for line in written if line.startswith("model")]
        assert len(models) == (3 if script is sequential else 2)

        # Run again under the same run id: the stored output, nothing called.
        again = DurableBinding(runtime(store, agent, log), "cmd-run", HANDLERS)
        assert (await agent.run("Use both tools.", durable=again)).output == OUTPUT
        assert lines(log) == written

        # Each stored operation, executed again with a command that would fail if it ran,
        # returns its record without calling anything.
        broken = runtime(store, agent, log, [sys.executable, "-c", "import sys; sys.exit(3)"])
        stored = rows(
            db,
            "SELECT step_id, sequence, kind, handler_id, input_json, record FROM operations "
            "WHERE run_id = 'cmd-run' ORDER BY step_id, sequence",
        )
        assert [row[:2] for row in stored if row[0] == "tool.call"] == [
            ("tool.call", int(line.rsplit("#", 1)[1])) for line in tool_lines
        ]
        for step_id, sequence, kind, handler_id, _, _ in stored:
            # the input whole, as the store composes it from the content it keeps once
            row = await store.get_operation(OperationKey("cmd-run", step_id, sequence))
            assert row is not None and row.record is not None
            input_json = zincir.decode_record(row.record).invocation.input_json
            invocation = Invocation(
                "cmd-run", step_id, sequence, OperationKind(kind), handler_id, input_json
            )
            record = await broken.execute(invocation)
            assert isinstance(record.outcome, Success)
        assert lines(log) == written
    finally:
        await store.close()

    found = seqs(db, "cmd-run")
    assert found == list(range(1, len(found) + 1))
    assert rows(db, "SELECT status FROM agent_runs WHERE id = 'cmd-run'") == [("completed",)]


async def test_a_failing_command_fails_the_run_with_its_record(tmp_path: Path) -> None:
    """A command that exits non-zero is a persisted failure: an explicit error, no fallback
    (with tool_errors="fail" and no tool retries; by default the model reads the error)."""
    db, log = tmp_path / "x.db", tmp_path / "log"
    store = zincir.open_store(db)
    try:
        failing = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]
        agent = build(log, tool_errors="fail", tool_retry=zincir.RetryPolicy.no_retry())
        local = runtime(store, agent, log, failing, retry=zincir.RetryPolicy.no_retry())
        binding = DurableBinding(local, "cmd-fail", HANDLERS)
        with pytest.raises(zincir.OperationFailed) as raised:
            await agent.run("Use both tools.", durable=binding)
        assert "CommandExited" in str(raised.value)
        assert lines(log) == ["model 0"]  # the local tool function never ran
    finally:
        await store.close()
