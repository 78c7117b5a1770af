"""OpenTelemetry spans: one per real execution, none for a replayed record, one trace per run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.agent.runner_agents import LOG_ENV, refunds
from tests.conftest import REPO
from tests.telemetry.agents import KILL_ENV, PROMPT, agent, span_line
from zincir import WorkflowContext
from zincir.agent import Approve, Runner
from zincir.store import Store
from zincir.testing import capture_spans

pytest.importorskip("opentelemetry.sdk")

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
ANSWER = "Oslo: 68.0 F"


def as_dicts(spans: Any) -> list[dict[str, Any]]:
    return [json.loads(span_line(span)) for span in spans]


def of_kind(spans: list[dict[str, Any]], operation: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["attributes"].get("gen_ai.operation.name") == operation]


async def test_a_run_has_a_span_per_model_request_and_tool_call(store: Store) -> None:
    runner = Runner(store, [agent])
    with capture_spans() as captured:
        result = await runner.run(agent, PROMPT, run_id="warm")
    assert result.output == ANSWER
    spans = as_dicts(captured)
    chats = of_kind(spans, "chat")
    assert [s["attributes"]["zincir.sequence"] for s in chats] == [0, 1, 2]
    for number, chat in enumerate(chats):
        attributes = chat["attributes"]
        assert chat["name"] == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.request.model"]
        assert attributes["gen_ai.usage.input_tokens"] == 10 + number
        assert attributes["gen_ai.usage.output_tokens"] == 3
        assert attributes["zincir.run_id"] == "warm"
    tools = of_kind(spans, "execute_tool")
    assert [(s["name"], s["attributes"]["gen_ai.tool.name"]) for s in tools] == [
        ("execute_tool lookup", "lookup"),
        ("execute_tool convert", "convert"),
    ]
    assert [s["attributes"]["gen_ai.tool.call.id"] for s in tools] == [
        "call-lookup",
        "call-convert",
    ]
    [run] = of_kind(spans, "invoke_agent")
    assert run["name"] == "invoke_agent thermo" and run["parent_id"] is None
    assert {s["trace_id"] for s in spans} == {run["trace_id"]}
    assert all(s["parent_id"] == run["span_id"] for s in chats + tools)

    # The finished run again: its stored result, nothing executes, no span.
    with capture_spans() as again:
        assert (await Runner(store, [agent]).run(agent, PROMPT, run_id="warm")).output == ANSWER
    assert of_kind(as_dicts(again), "chat") == of_kind(as_dicts(again), "execute_tool") == []


@pytest.mark.crash
async def test_a_run_killed_in_a_tool_and_resumed_elsewhere_is_one_trace(
    store_target: str, tmp_path: Path
) -> None:
    spans_file = tmp_path / "child-spans.jsonl"
    child = subprocess.run(
        [sys.executable, "-m", "tests.telemetry.agents", store_target, "cut", str(spans_file)],
        env={**ENV, KILL_ENV: "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    before = [json.loads(line) for line in spans_file.read_text().splitlines()]
    # The child ended model requests 0 and 1 and the first tool call; it died in the second.
    assert [s["name"].split()[0] for s in before] == ["chat", "execute_tool", "chat"]

    with capture_spans() as captured:
        async with Runner(store_target, [agent], lease_ttl=timedelta(seconds=60)) as runner:
            assert (await runner.run(agent, PROMPT, run_id="cut")).output == ANSWER
    after = as_dicts(captured)
    everything = before + after
    chats = of_kind(everything, "chat")
    assert sorted(s["attributes"]["zincir.sequence"] for s in chats) == [0, 1, 2]
    tools = of_kind(everything, "execute_tool")
    assert sorted(s["attributes"]["gen_ai.tool.call.id"] for s in tools) == [
        "call-convert",
        "call-lookup",
    ]
    [cut] = [s for s in tools if s["attributes"]["gen_ai.tool.call.id"] == "call-convert"]
    assert cut in after  # the call cut off by the kill ran (and ended) in the resumed process
    assert len({s["trace_id"] for s in everything}) == 1
    [resumed] = of_kind(after, "invoke_agent")
    assert resumed["parent_id"] == before[0]["parent_id"]  # the first attempt's span


async def test_a_replayed_workflow_step_emits_no_span(store: Store) -> None:
    with capture_spans() as first:
        async with await WorkflowContext.open(store, "flow") as wf:
            assert await wf.step("fetch", lambda: 41) == 41
    with capture_spans() as second:
        async with await WorkflowContext.open(store, "flow") as wf:
            assert await wf.step("fetch", lambda: 0) == 41  # replayed
            assert await wf.step("add", lambda: 42) == 42
    ran = as_dicts(first)
    assert [s["name"] for s in ran] == ["zincir step fetch", "zincir workflow"]
    assert ran[0]["parent_id"] == ran[1]["span_id"]
    spans = as_dicts(second)
    assert [s["name"] for s in spans] == ["zincir step add", "zincir workflow"]
    assert {s["trace_id"] for s in ran + spans} == {ran[0]["trace_id"]}


def test_zincir_runs_without_opentelemetry(tmp_path: Path) -> None:
    code = f"""
import asyncio, sys
sys.modules["opentelemetry"] = None
from tests.telemetry.agents import PROMPT, agent
from zincir import WorkflowContext, open_store
from zincir.agent import Approve, Runner

async def main():
    async with Runner({str(tmp_path / "x.db")!r}, [agent]) as runner:
        print((await runner.run(agent, PROMPT, run_id="r")).output)
        async with await WorkflowContext.open(runner.store, "w") as wf:
            print(await wf.step("s", lambda: 1))
    try:
        import opentelemetry.trace
    except ImportError:
        print("no opentelemetry")

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", code], env=ENV, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [ANSWER, "1", "no opentelemetry"]


async def test_a_pause_for_approval_and_its_decision_are_spans_of_the_run(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "calls.log"))
    runner = Runner(store, [refunds])
    with capture_spans() as paused:
        assert (await runner.run(refunds, "Refund A-17", run_id="refund")).paused is not None
    [wait] = [s for s in as_dicts(paused) if s["name"] == "zincir approval wait"]
    assert wait["attributes"]["zincir.approval.call_ids"] == ["call-refund"]
    assert wait["attributes"]["gen_ai.tool.name"] == ["refund"]
    with capture_spans() as resumed:
        done = await runner.resume("refund", {"call-refund": Approve()})
    assert done.output.startswith("done")
    names = [s["name"] for s in as_dicts(resumed)]
    assert "zincir approval_resume" in names and "execute_tool refund" in names
    assert "zincir approval wait" not in names
    assert {s["trace_id"] for s in as_dicts(paused) + as_dicts(resumed)} == {wait["trace_id"]}
