"""DurableRunner.run_streamed (events replayed from the records) and tool approvals answered
from another process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is in the dev extra")

from agents.stream_events import (  # noqa: E402
    AgentUpdatedStreamEvent,
    RawResponsesStreamEvent,
    RunItemStreamEvent,
)

import zincir  # noqa: E402
from tests.agent.openai_server import ChatServer, Reply, call_delta, chunk, usage  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.integrations.openai_agents.support_agents import (  # noqa: E402
    ANSWER,
    PROMPT,
    script,
    support,
)
from zincir import ApprovalMismatch  # noqa: E402
from zincir.agent import Deny, decide, pending_approvals  # noqa: E402
from zincir.integrations.openai_agents import DurableRunner  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def streamed_script() -> list[Reply]:
    return [
        Reply(
            chunks=[chunk(call_delta(0, "{}", call_id="h-1", name="transfer_to_billing"))]
            + [chunk(finish_reason="tool_calls"), chunk(usage_=usage(10, 2))]
        ),
        Reply(
            chunks=[
                chunk(call_delta(0, '{"order":', call_id="c-1", name="lookup")),
                chunk(call_delta(0, '"A-17"}')),
                chunk(finish_reason="tool_calls"),
                chunk(usage_=usage(12, 3)),
            ]
        ),
        Reply(
            chunks=[
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Refunded 4200 "}),
                chunk({"content": "cents for A-17."}),
                chunk(finish_reason="stop"),
                chunk(usage_=usage(20, 6)),
            ]
        ),
    ]


def shape(event: Any) -> tuple[str, str]:
    """What a stream event says, without the ids and times a new run makes up."""
    if isinstance(event, RawResponsesStreamEvent):
        return ("raw", event.data.type + ":" + str(getattr(event.data, "delta", "")))
    if isinstance(event, RunItemStreamEvent):
        return ("item", event.name)
    assert isinstance(event, AgentUpdatedStreamEvent)
    return ("agent", event.new_agent.name)


async def test_a_streamed_run_replays_its_events_without_calling_anything(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*streamed_script())
    runner = DurableRunner(store)
    agent = support(server.client(), log)
    first = runner.run_streamed(agent, PROMPT, run_id="stream-1")
    live = [shape(event) async for event in first.stream_events()]
    assert first.final_output == ANSWER
    assert ("raw", "response.output_text.delta:cents for A-17.") in live
    assert ("agent", "billing") in live
    replay = runner.run_streamed(agent, PROMPT, run_id="stream-1")
    replayed = [shape(event) async for event in replay.stream_events()]
    assert replayed == live
    assert replay.final_output == ANSWER
    assert len(server.received) == 3
    assert log.read_text("utf-8").splitlines() == ["tool lookup A-17"]
    steps = [
        event.payload["step_id"]
        for event in await store.list_events("stream-1")
        if event.type == "operation_completed"
    ]
    assert steps.count("openai_agents.model.stream") == 3


async def test_a_streamed_run_cut_short_resumes_from_the_finished_model_calls(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    replies = streamed_script()
    server.script(*replies[:2])  # the answer's request finds the script exhausted: a 500
    runner = DurableRunner(store)
    agent = support(server.client(), log)
    with pytest.raises(Exception):  # noqa: B017 - the SDK's error for the 500
        async for _ in runner.run_streamed(agent, PROMPT, run_id="stream-2").stream_events():
            pass
    assert len(server.received) == 3
    server.script(replies[2])
    resumed = runner.run_streamed(agent, PROMPT, run_id="stream-2")
    async for _ in resumed.stream_events():
        pass
    assert resumed.final_output == ANSWER
    assert len(server.received) == 4
    assert log.read_text("utf-8").splitlines() == ["tool lookup A-17"]


# -- approvals ----------------------------------------------------------------------------------


def cli(store_target: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "zincir", "approvals", *args, "--db", store_target],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_an_approval_answered_from_another_process_resumes_the_run(
    store_target: str, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*script())
    async with zincir.open_store(store_target) as store:
        runner = DurableRunner(store)
        agent = support(server.client(), log, approve_refund=True)
        paused = await runner.run(agent, PROMPT, run_id="approve-1")
        assert [item.name for item in paused.interruptions] == ["refund"]
        assert paused.final_output is None
        assert log.read_text("utf-8").splitlines() == ["tool lookup A-17"]
        waiting = await pending_approvals(store, "approve-1")
        assert [(a.tool, a.call_id, a.arguments) for a in waiting] == [
            ("refund", "c-2", {"order": "A-17", "cents": 4200})
        ]
        again = await runner.run(agent, PROMPT, run_id="approve-1")  # undecided: still waits
        assert [item.name for item in again.interruptions] == ["refund"]
        assert len(server.received) == 3
        listed = await asyncio.to_thread(cli, store_target, "list")
        assert "approve-1" in listed and "refund" in listed
        digest = waiting[0].args_sha256
        await asyncio.to_thread(
            cli, store_target, "approve", waiting[0].approval_id, "--args-sha256", digest
        )
        done = await runner.run(agent, PROMPT, run_id="approve-1")
        assert done.final_output == ANSWER
        assert done.interruptions == []
        assert len(server.received) == 4  # the finished model calls were not made again
        assert log.read_text("utf-8").splitlines() == [
            "tool lookup A-17",
            "tool refund A-17 started",
            "tool refund A-17 done",
        ]
        run = await store.get_run("approve-1")
        assert run is not None and run["status"] == "completed"
        replayed = await runner.run(agent, PROMPT, run_id="approve-1")
        assert replayed.final_output == ANSWER and len(server.received) == 4


async def test_a_denied_call_tells_the_model_why_and_never_runs(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), log, approve_refund=True)
    await runner.run(agent, PROMPT, run_id="deny-1")
    (waiting,) = await pending_approvals(store, "deny-1")
    await decide(store, waiting.approval_id, Deny("refunds need a manager"))
    done = await runner.run(agent, PROMPT, run_id="deny-1")
    assert done.final_output == ANSWER
    assert "refunds need a manager" in str(server.bodies[-1]["messages"])
    assert log.read_text("utf-8").splitlines() == ["tool lookup A-17"]
    results = [e.payload for e in await store.list_events("deny-1") if e.type == "tool_result"]
    assert results[-1] == {
        "id": "c-2",
        "result": "denied: refunds need a manager",
        "is_error": True,
    }


async def test_an_approval_of_other_arguments_is_refused(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log", approve_refund=True)
    await runner.run(agent, PROMPT, run_id="bound-1")
    (waiting,) = await pending_approvals(store, "bound-1")
    with pytest.raises(ApprovalMismatch) as raised:
        await decide(store, waiting.approval_id, zincir.agent.Approve(), args_sha256="0" * 64)
    assert raised.value.run_id == "bound-1"


async def test_a_streamed_run_waits_for_an_approval_and_continues_streamed(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    replies = streamed_script()
    refund = Reply(
        chunks=[
            chunk(call_delta(0, '{"order":"A-17","cents":4200}', call_id="c-2", name="refund")),
            chunk(finish_reason="tool_calls"),
            chunk(usage_=usage(15, 4)),
        ]
    )
    server.script(replies[0], replies[1], refund, replies[2])
    runner = DurableRunner(store)
    agent = support(server.client(), log, approve_refund=True)
    paused = runner.run_streamed(agent, PROMPT, run_id="stream-approve-1")
    async for _ in paused.stream_events():
        pass
    assert [item.name for item in paused.interruptions] == ["refund"]
    (waiting,) = await pending_approvals(store, "stream-approve-1")
    await decide(store, waiting.approval_id, zincir.agent.Approve())
    resumed = runner.run_streamed(agent, PROMPT, run_id="stream-approve-1")
    shapes = [shape(event) async for event in resumed.stream_events()]
    assert resumed.final_output == ANSWER and resumed.interruptions == []
    assert ("item", "tool_output") in shapes
    assert ("raw", "response.output_text.delta:cents for A-17.") in shapes
    assert len(server.received) == 4
    assert log.read_text("utf-8").splitlines() == [
        "tool lookup A-17",
        "tool refund A-17 started",
        "tool refund A-17 done",
    ]
