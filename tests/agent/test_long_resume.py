"""A long run resumed in a new process restarts its loop at its last model request: the
conversation, usage and step count it continues with are those of a full replay, nothing that
completed is called again, earlier turns are not replayed one by one, and drift is still
found. Killed waiting for the model, inside a tool, with rejected calls and approvals."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.long_resume_agent import PROMPT, build, lines
from tests.conftest import REPO
from tests.helpers import kill_at_line
from zincir.agent import AgentRunResult, Approve, Deny, Runner, decide
from zincir.agent._durable import DurableExecutor
from zincir.contract import Invocation, decode_record
from zincir.contract.payloads import ToolRequest
from zincir.durable import LocalRuntime
from zincir.store import OperationKey, approval_id

WORKER = Path(__file__).with_name("long_resume_agent.py")
TURNS = 60  # the run's length: the process is stopped near its end
LEASE_TTL = timedelta(seconds=60)


def kill_at(target: str, run_id: str, log: Path, hang: str, at: int, *options: str) -> None:
    """Run the agent in a child process and SIGKILL it at turn ``at`` (asking the model, or
    inside the tool)."""
    args = [target, run_id, str(TURNS), str(log), "--hang", hang, "--at", str(at), *options]
    expected = f"{'asked' if hang == 'model' else 'inside'} {at}\n"
    assert kill_at_line(WORKER, args) == expected


def turn_of(invocation: Invocation) -> int:
    """The turn an operation belongs to (see zincir.agent._identity)."""
    base = invocation.sequence % 10**12
    return base if invocation.step_id == "model.request" else base // 1000


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[Invocation]:
    """Every operation a LocalRuntime of this process executes or replays."""
    seen: list[Invocation] = []
    execute = LocalRuntime._execute

    async def counted(self: LocalRuntime, inv: Invocation, *args: Any) -> Any:
        seen.append(inv)
        return await execute(self, inv, *args)

    monkeypatch.setattr(LocalRuntime, "_execute", counted)
    return seen


@pytest.fixture
def restarts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each turn a durable loop of this process went on from, skipping the turns before."""
    seen: list[int] = []
    restart_at = DurableExecutor.restart_at

    async def noted(self: DurableExecutor, number: int) -> Any:
        found = await restart_at(self, number)
        if found is not None:
            seen.append(found.number)
        return found

    monkeypatch.setattr(DurableExecutor, "restart_at", noted)
    return seen


async def reference(
    target: str, log: Path, decided: dict[str, Any] | None = None, **options: Any
) -> AgentRunResult:
    """The same run made in one go (its calls decided as ``decided`` says, else approved
    as asked), for comparison."""
    agent = build(TURNS, log, **options)
    async with Runner(target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.run(agent, PROMPT, run_id="reference")
        while result.paused is not None:
            decisions = {
                call.call_id: (decided or {}).get(call.call_id, Approve())
                for call in result.paused.calls
            }
            result = await runner.resume("reference", decisions)
    return result


async def check_log(target: str, run_id: str, result: AgentRunResult) -> None:
    """One response logged per request and one result per call: nothing twice."""
    store = zincir.open_store(target)
    try:
        events = await store.list_events(run_id)
    finally:
        await store.close()
    kinds = Counter(event.type for event in events)
    assert kinds["llm_call"] == sum(1 for m in result.messages if m.role == "assistant")
    results = [e.payload["id"] for e in events if e.type == "tool_result"]
    assert len(results) == len(set(results)) == sum(1 for m in result.messages if m.role == "tool")


@pytest.mark.crash
async def test_a_run_killed_waiting_for_the_model_restarts_at_its_last_request(
    store_target: str, tmp_path: Path, executed: list[Invocation], restarts: list[int]
) -> None:
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    kill_at(store_target, "long", log, "model", TURNS - 5)
    assert lines(log)[-2:] == [f"model {TURNS - 6}", f"tool {TURNS - 6}"]
    agent = build(TURNS, again)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    # Nothing that completed is called again; the cut-off request is made once.
    expected = [f"model {TURNS - 5}"]
    expected += [line for n in range(TURNS - 4, TURNS) for line in (f"tool {n - 1}", f"model {n}")]
    assert lines(again) == [*expected, f"tool {TURNS - 1}", f"model {TURNS}"]
    # Only the last turn before the kill replays (its model request without a read).
    replayed = [(inv.step_id, turn_of(inv)) for inv in executed if turn_of(inv) < TURNS - 5]
    assert replayed == [("tool.call", TURNS - 6)]
    assert restarts == [TURNS - 6]
    executed.clear()
    whole = await reference(store_target, tmp_path / "reference.log")
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    assert result.usage.details == {"turns": TURNS + 1}
    await check_log(store_target, "long", result)


@pytest.mark.crash
async def test_a_streamed_run_resumed_by_a_runner_restarts_at_its_last_request(
    store_target: str, tmp_path: Path, restarts: list[int]
) -> None:
    """A run started streamed and resumed by ``Runner.resume`` (its parts read by no one)
    restarts the same way, on its ``model.stream`` records."""
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    kill_at(store_target, "long", log, "model", TURNS - 5, "--stream")
    agent = build(TURNS, again)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    assert restarts == [TURNS - 6]
    assert lines(again)[0] == f"model {TURNS - 5}"
    assert Counter(lines(again))[f"tool {TURNS - 6}"] == 0
    whole = await reference(store_target, tmp_path / "reference.log")
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    await check_log(store_target, "long", result)


@pytest.mark.crash
async def test_a_run_killed_inside_a_tool_runs_that_call_again_and_nothing_else(
    store_target: str, tmp_path: Path, executed: list[Invocation]
) -> None:
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    kill_at(store_target, "long", log, "tool", TURNS - 5)
    assert lines(log)[-1] == f"model {TURNS - 5}"
    agent = build(TURNS, again)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    assert lines(again)[:2] == [f"tool {TURNS - 5}", f"model {TURNS - 4}"]
    assert Counter(lines(again))[f"model {TURNS - 5}"] == 0
    assert not [inv for inv in executed if turn_of(inv) < TURNS - 5]
    whole = await reference(store_target, tmp_path / "reference.log")
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    await check_log(store_target, "long", result)


@pytest.mark.crash
async def test_a_run_that_paused_for_an_approval_restarts_at_that_turn(
    store_target: str, tmp_path: Path, restarts: list[int]
) -> None:
    """A decided call is checked against its decision as its turn replays: the loop
    restarts no later than a turn that paused, and continues as a full replay would."""
    log = tmp_path / "first.log"
    options = ["--reject", "20", "--reject", str(TURNS - 7), "--approve", "10"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    started = subprocess.run(
        [sys.executable, str(WORKER), store_target, "long", str(TURNS), str(log), *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert started.stdout == "paused c-10\n", started.stderr
    waiting = build(TURNS, tmp_path / "waiting.log", reject=(20, TURNS - 7), approve=(10,))
    async with Runner(store_target, [waiting], lease_ttl=LEASE_TTL) as runner:
        still = await runner.resume("long")  # undecided: the same pause, not logged again
    assert still.paused is not None and [c.call_id for c in still.paused.calls] == ["c-10"]
    assert lines(tmp_path / "waiting.log") == []
    store = zincir.open_store(store_target)
    try:
        events = await store.list_events("long")
        assert [e.type for e in events].count("agent_paused") == 1
        await decide(store, approval_id("long", "c-10"), Approve())
    finally:
        await store.close()
    # The decision applied, the run goes on past the second rejection and is killed in the
    # call that follows it.
    kill_at(store_target, "long", log, "tool", TURNS - 6, *options)
    assert lines(log).count("refund 10") == 1
    third = tmp_path / "third.log"
    agent = build(TURNS, third, reject=(20, TURNS - 7), approve=(10,))
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    assert lines(third)[0] == f"tool {TURNS - 6}"
    assert "refund 10" not in lines(third)
    # The turn that paused replays; the loop skips the others.
    assert restarts == [10, 10, TURNS - 6]
    whole = await reference(
        store_target, tmp_path / "ref.log", reject=(20, TURNS - 7), approve=(10,)
    )
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    await check_log(store_target, "long", result)


@pytest.mark.crash
@pytest.mark.parametrize("workflow", [False, True])
async def test_a_rejected_calls_failure_count_carries_to_the_restarted_loop(
    store_target: str, tmp_path: Path, restarts: list[int], workflow: bool
) -> None:
    """The call after a rejected one carries its retry number in its input: the restarted
    loop holds the failure count the log tells (a rejected call is an error result without
    a record). With a tool run in the agent's process, whose error results have no record
    either, it restarts before the rejection instead, past an earlier one that a later call
    of its tool ended."""
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    rejected = (20, TURNS - 7)
    options = ["--reject", "20", "--reject", str(TURNS - 7)] + (["--workflow"] if workflow else [])
    kill_at(store_target, "long", log, "tool", TURNS - 6, *options)
    agent = build(TURNS, again, reject=rejected, workflow=workflow)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    assert lines(again)[:2] == [f"tool {TURNS - 6}", f"model {TURNS - 5}"]
    assert restarts == ([20, TURNS - 7] if workflow else [TURNS - 6])
    whole = await reference(store_target, tmp_path / "ref.log", reject=rejected, workflow=workflow)
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    await check_log(store_target, "long", result)


@pytest.mark.crash
async def test_a_denied_call_ends_its_tools_failure_count_across_a_restart(
    store_target: str, tmp_path: Path, restarts: list[int]
) -> None:
    """A call that paused was not rejected: its turn ends its tool's failure count (a
    denied call has no record either), so the approved call after it runs with retry 0."""
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    options = ["--bad-refund", "5", "--approve", "10", "--approve", "30"]
    shape: dict[str, Any] = {"bad_refund": (5,), "approve": (10, 30)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    for call, decision in (("c-10", Deny()), ("c-30", Approve())):
        paused = subprocess.run(
            [sys.executable, str(WORKER), store_target, "long", str(TURNS), str(log), *options],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert paused.stdout == f"paused {call}\n", paused.stderr
        store = zincir.open_store(store_target)
        try:
            await decide(store, approval_id("long", call), decision)
        finally:
            await store.close()
    kill_at(store_target, "long", log, "model", 40, *options)
    assert lines(log).count("refund 30") == 1
    store = zincir.open_store(store_target)
    try:  # the approved refund ran with no failure count
        row = await store.get_operation(OperationKey("long", "tool.call", 30_000))
        assert row is not None and row.record is not None
        assert ToolRequest.from_json(decode_record(row.record).invocation.input_json).retry == 0
    finally:
        await store.close()
    agent = build(TURNS, again, **shape)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.resume("long")
    assert restarts == [10, 30, 39]  # the paused turns replay
    assert lines(again)[0] == "model 40" and "refund 30" not in lines(again)
    whole = await reference(store_target, tmp_path / "ref.log", {"c-10": Deny()}, **shape)
    assert (result.output, result.messages, result.usage) == (
        whole.output,
        whole.messages,
        whole.usage,
    )
    await check_log(store_target, "long", result)


@pytest.mark.crash
@pytest.mark.parametrize("change", ["instructions", "tool"])
async def test_drift_after_many_turns_is_found_on_resume(
    store_target: str, tmp_path: Path, change: str
) -> None:
    log, again = tmp_path / "first.log", tmp_path / "again.log"
    kill_at(store_target, "long", log, "model", TURNS - 5)
    if change == "instructions":
        agent = build(TURNS, again, instructions="You read catalogues aloud.")
    else:
        agent = build(TURNS, again, description="Read one section of the catalogue, aloud.")
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        with pytest.raises(zincir.InputDrift, match="recorded with other input") as raised:
            await runner.resume("long")
    assert lines(again) == []
    if change == "instructions":  # the opening of the conversation: its first request
        assert "model request 1 was recorded" in str(raised.value)
    else:  # the tools on offer: the request the loop restarts at
        assert f"model request {TURNS - 5} was recorded" in str(raised.value)
        assert "read_section" in str(raised.value)
