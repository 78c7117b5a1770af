"""A durable pause's ``agent_paused`` event names the model request whose record holds the
conversation instead of holding it: a run paused and killed (SIGKILL) is rebuilt in a new
process with the very conversation it paused with, and resumes as a run made in one go; an
event written by an earlier version (holding the conversation) still rebuilds and resumes;
a runtime keeping its records in another store still logs the conversation in the event."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.long_resume_agent import LEASE_TTL, PROMPT, build, lines
from tests.agent.paused_agent import digest
from tests.helpers import is_postgres, kill_at_line, read_store
from zincir.agent import (
    AgentRunResult,
    Approve,
    DurableBinding,
    PausedRun,
    Runner,
    decide,
    serve,
)
from zincir.store import approval_id

WORKER = Path(__file__).with_name("paused_agent.py")
TURNS = 40
FIRST, SECOND = 12, 30  # the turns whose refund waits for an approval
RUN = "long"


def hold_paused(target: str, log: Path) -> str:
    """Run (or continue) the run in a child process until it pauses, then SIGKILL it there;
    the digest of the conversation the child paused with."""
    options = ["--approve", str(FIRST), "--approve", str(SECOND)]
    line = kill_at_line(WORKER, [target, RUN, str(TURNS), str(log), *options])
    assert line.startswith("paused "), line
    return line.split()[-1]


async def pause_events(target: str) -> list[dict[str, Any]]:
    """The payloads of the run's ``agent_paused`` events, in order."""
    events = await read_store(target, lambda store: store.list_events(RUN))
    return [event.payload for event in events if event.type == "agent_paused"]


def bound(agent: zincir.agent.Agent, runner: Runner) -> DurableBinding:
    """A binding on the runner's run (``agent.paused_run`` reads the run through it)."""
    return DurableBinding(runner.runtime, RUN, Runner.handlers_for(agent), store=runner.store)


async def reference(target: str, log: Path) -> tuple[list[PausedRun], AgentRunResult]:
    """The same run made in one go in this process, each call approved as asked: its
    pauses, as its loop held them, and its result."""
    agent = build(TURNS, log, approve=(FIRST, SECOND))
    pauses: list[PausedRun] = []
    async with Runner(target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.run(agent, PROMPT, run_id="reference")
        while result.paused is not None:
            pauses.append(result.paused)
            decisions = {call.call_id: Approve() for call in result.paused.calls}
            result = await runner.resume("reference", decisions)
    return pauses, result


@pytest.mark.crash
async def test_a_run_paused_and_killed_resumes_with_the_conversation_it_paused_with(
    store_target: str, tmp_path: Path
) -> None:
    pauses, whole = await reference(store_target, tmp_path / "reference.log")
    assert [p.request_number for p in pauses] == [FIRST, SECOND]
    agent = build(TURNS, tmp_path / "here.log", approve=(FIRST, SECOND))

    # A process pauses at the first refund and is killed there; its event holds no messages.
    held = hold_paused(store_target, tmp_path / "first.log")
    (event,) = await pause_events(store_target)
    assert "messages" not in event
    assert event["conversation"] == {"step_id": "model.request", "sequence": FIRST}
    assert held == digest(pauses[0].messages)
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        paused = await agent.paused_run(durable=bound(agent, runner))
        assert paused == dataclasses.replace(pauses[0], run_id=RUN)
        assert digest(paused.messages) == held
        await decide(runner.store, approval_id(RUN, f"c-{FIRST}"), Approve())

    # Another process applies that decision, pauses at the second refund, and is killed.
    held = hold_paused(store_target, tmp_path / "second.log")
    assert held == digest(pauses[1].messages)
    events = await pause_events(store_target)
    assert [e["request_number"] for e in events] == [FIRST, SECOND]
    assert not any("messages" in e for e in events)

    # Resumed here with a decision: the conversation goes on as the run made in one go.
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        paused = await agent.paused_run(durable=bound(agent, runner))
        assert paused == dataclasses.replace(pauses[1], run_id=RUN)
        done = await runner.resume(RUN, {f"c-{SECOND}": Approve()})
    assert (done.output, done.messages, done.usage) == (whole.output, whole.messages, whole.usage)
    assert lines(tmp_path / "here.log")[:2] == [f"refund {SECOND}", f"model {SECOND + 1}"]


def rewrite_event(target: str, seq: int, payload: dict[str, Any]) -> None:
    """Put ``payload`` in event ``seq`` of the run (as an earlier version wrote it)."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    statement = "UPDATE events SET payload = ? WHERE run_id = ? AND seq = ?"
    if is_postgres(target):
        import psycopg

        from zincir.store.postgres._base import split_schema

        conninfo, schema, _ = split_schema(target)
        with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
            conn.execute(statement.replace("?", "%s"), (text, RUN, seq))
        return
    import apsw

    conn = apsw.Connection(target)
    try:
        with conn:
            conn.execute(statement, (text, RUN, seq))
    finally:
        conn.close()


async def test_a_pause_logged_with_its_conversation_by_an_earlier_version_resumes(
    store_target: str, tmp_path: Path
) -> None:
    pauses, whole = await reference(store_target, tmp_path / "reference.log")
    agent = build(TURNS, tmp_path / "run.log", approve=(FIRST, SECOND))
    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        first = await runner.run(agent, PROMPT, run_id=RUN)
    assert first.paused is not None
    events = await read_store(store_target, lambda store: store.list_events(RUN))
    (seq,) = [event.seq for event in events if event.type == "agent_paused"]
    rewrite_event(store_target, seq, first.paused.to_dict())  # the former form: messages

    async with Runner(store_target, [agent], lease_ttl=LEASE_TTL) as runner:
        paused = await agent.paused_run(durable=bound(agent, runner))
        assert paused == first.paused == dataclasses.replace(pauses[0], run_id=RUN)
        still = await runner.resume(RUN)  # undecided: the same pause, not logged again
        assert still.paused == first.paused
        assert await pause_events(store_target) == [first.paused.to_dict()]
        second = await runner.resume(RUN, {f"c-{FIRST}": Approve()})
        assert second.paused == dataclasses.replace(pauses[1], run_id=RUN)
        assert "messages" not in (await pause_events(store_target))[-1]
        done = await runner.resume(RUN, {f"c-{SECOND}": Approve()})
    assert (done.output, done.messages, done.usage) == (whole.output, whole.messages, whole.usage)


@pytest.mark.sqlite_only
async def test_a_runtime_keeping_records_in_another_store_logs_the_conversation(
    tmp_path: Path,
) -> None:
    """The run's store does not hold the request's record: the event holds the messages."""
    agent = build(TURNS, tmp_path / "run.log", approve=(FIRST,))
    handlers = Runner.handlers_for(agent)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    records, runs = (
        zincir.open_store(tmp_path / "records.db"),
        zincir.open_store(tmp_path / "runs.db"),
    )
    try:
        binding = DurableBinding(zincir.LocalRuntime(records, registry), RUN, handlers, store=runs)
        first = await agent.run(PROMPT, durable=binding)
        assert first.paused is not None
        (event,) = [e.payload for e in await runs.list_events(RUN) if e.type == "agent_paused"]
        assert event == first.paused.to_dict() and event["messages"]
        assert await agent.paused_run(durable=binding) == first.paused
        done = await agent.resume(first.paused, {f"c-{FIRST}": Approve()}, durable=binding)
        assert done.output == f"read {TURNS} turns"
    finally:
        await records.close()
        await runs.close()
