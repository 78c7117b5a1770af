"""Parallel tool calls on ZincirDurability: side by side, numbered by their position in the
model response, so a replay maps each call to its own records whatever order they finish in."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402

import zincir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers import rows, select  # noqa: E402
from tests.integrations.pydantic_ai.worker import LEASE_TTL  # noqa: E402
from zincir import HandlerRegistry, InvalidInput, LocalRuntime, RetryPolicy  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402

WORKER = Path(__file__).with_name("parallel_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
TOOL_STEP = "pydantic_ai.shop.tool.call"
NESTED = 1 << 61


def three_calls(calls: Counter[str]) -> FunctionModel:
    """Asks for c0, c1 and c2 at once, then answers with the tool results it got."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            return ModelResponse(
                parts=[ToolCallPart("check", {"item": k}, f"c{k}") for k in range(3)]
            )
        return ModelResponse(parts=[TextPart("all checked")])

    return FunctionModel(model)


def shop(store: zincir.Store, calls: Counter[str], **durability: Any) -> Agent[None, str]:
    return Agent(
        three_calls(calls), name="shop", capabilities=[ZincirDurability(store, **durability)]
    )


def tool_rows(db_path: Path, run_id: str) -> dict[int, str]:
    """Each tool.call record's sequence -> the call id its input names."""
    found = rows(
        db_path,
        "SELECT sequence, input_json FROM operations WHERE run_id = ? AND step_id = ?",
        (run_id, TOOL_STEP),
    )
    return {sequence: json.loads(text)["tool_call_id"] for sequence, text in found}


async def test_calls_run_side_by_side_and_take_their_positions_whatever_order_they_finish(
    db_path: Path,
) -> None:
    calls: Counter[str] = Counter()
    spans: dict[int, tuple[float, float]] = {}
    async with zincir.open_store(db_path) as store:
        agent = shop(store, calls)

        @agent.tool_plain
        async def check(item: int) -> str:
            """Check an item (the first one takes longest)."""
            calls[f"check {item}"] += 1
            started = time.monotonic()
            await asyncio.sleep(0.05 * (2 - item))
            spans[item] = (started, time.monotonic())
            return f"{item} ok"

        first = await agent.run("Check 0, 1 and 2.", run_id="side-1")
        again = await agent.run("Check 0, 1 and 2.", run_id="side-1")

    assert first.output == again.output == "all checked"
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values())
    assert spans[2][1] < spans[1][1] < spans[0][1]  # finished in the reverse order
    assert tool_rows(db_path, "side-1") == {0: "c0", 1: "c1", 2: "c2"}
    assert calls == Counter({"model": 2, "check 0": 1, "check 1": 1, "check 2": 1})


@dataclass
class LaterCallsFirst(AbstractCapability[None]):
    """Holds each call before it runs, the later calls for less time: their units start in
    the reverse order of the response."""

    async def before_tool_execute(
        self, ctx: RunContext[None], *, call: ToolCallPart, tool_def: ToolDefinition, args: Any
    ) -> Any:
        await asyncio.sleep(0.02 * (2 - int(call.tool_call_id[1:])))
        return args


async def test_calls_whose_units_start_in_another_order_keep_their_positions(
    db_path: Path,
) -> None:
    calls: Counter[str] = Counter()
    started: list[int] = []
    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            three_calls(calls),
            name="shop",
            capabilities=[ZincirDurability(store), LaterCallsFirst()],
        )

        @agent.tool_plain
        async def check(item: int) -> str:
            """Check an item."""
            started.append(item)
            return f"{item} ok"

        assert (await agent.run("Check 0, 1 and 2.", run_id="late")).output == "all checked"
        assert (await agent.run("Check 0, 1 and 2.", run_id="late")).output == "all checked"
    assert started == [2, 1, 0]
    assert tool_rows(db_path, "late") == {0: "c0", 1: "c1", 2: "c2"}


async def test_sequential_mode_keeps_the_same_identities(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    running: list[int] = []
    overlapped = False
    async with zincir.open_store(db_path) as store:
        agent = shop(store, calls, parallel_execution_mode="sequential")

        @agent.tool_plain
        async def check(item: int) -> str:
            """Check an item."""
            nonlocal overlapped
            overlapped = overlapped or bool(running)
            running.append(item)
            await asyncio.sleep(0.01)
            running.remove(item)
            return f"{item} ok"

        assert (await agent.run("Check 0, 1 and 2.", run_id="one-by-one")).output == "all checked"
    assert not overlapped
    assert tool_rows(db_path, "one-by-one") == {0: "c0", 1: "c1", 2: "c2"}


def test_an_unknown_execution_mode_is_refused(db_path: Path) -> None:
    with pytest.raises(InvalidInput, match="parallel_execution_mode"):
        ZincirDurability(db_path, parallel_execution_mode="parallel")  # type: ignore[arg-type]


async def test_the_calls_writes_share_commits(db_path: Path) -> None:
    async with zincir.open_store(db_path) as store:
        agent = shop(store, Counter())

        @agent.tool_plain
        async def check(item: int) -> str:
            """Check an item."""
            return f"{item} ok"

        before = store.writer_stats.batched_jobs
        await agent.run("Check 0, 1 and 2.", run_id="shared")
        # three claims in one commit and three records in another, at the least
        assert store.writer_stats.batched_jobs - before >= 6


async def test_retries_of_calls_failing_side_by_side_are_numbered_by_call(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        runtime = LocalRuntime(store, HandlerRegistry(), retry=RetryPolicy.no_retry())
        fast = RetryPolicy(max_attempts=3, initial_interval=0.001, max_interval=0.002)
        agent = shop(store, calls, runtime=runtime, retry=fast)

        @agent.tool_plain
        async def check(item: int) -> str:
            """Check an item; items 0 and 1 fail once, 1 sooner than 0."""
            calls[f"check {item}"] += 1
            await asyncio.sleep(0.02 * (2 - item))
            if item < 2 and calls[f"check {item}"] == 1:
                raise RuntimeError(f"item {item} is not ready yet")
            return f"{item} ok"

        assert (await agent.run("Check 0, 1 and 2.", run_id="flaky")).output == "all checked"
        assert (await agent.run("Check 0, 1 and 2.", run_id="flaky")).output == "all checked"

    assert calls == Counter({"model": 2, "check 0": 2, "check 1": 2, "check 2": 1})
    assert tool_rows(db_path, "flaky") == {
        0: "c0",
        1: "c1",
        2: "c2",
        1 << 32: "c0",
        1 | 1 << 32: "c1",
    }
    delays = rows(
        db_path,
        "SELECT sequence, input_json FROM operations WHERE step_id LIKE '%retry.delay' "
        "ORDER BY sequence",
    )
    assert [(sequence, json.loads(text)["failed"]) for sequence, text in delays] == [
        (NESTED | 0 << 20, f"flaky/{TOOL_STEP}/0"),
        (NESTED | 1 << 20, f"flaky/{TOOL_STEP}/1"),
    ]


@pytest.mark.crash
def test_sigkill_between_sibling_records_reruns_only_the_call_in_flight(
    store_target: str, tmp_path: Path
) -> None:
    db, log = store_target, tmp_path / "calls.log"
    argv = [sys.executable, str(WORKER), str(db), str(log), "parallel-1"]
    killed = subprocess.run([*argv, "kill"], env=ENV, capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = log.read_text("utf-8").splitlines()
    assert before[0] == "model 0"
    assert sorted(before[1:]) == ["tool fast a", "tool fast b", "tool slow c"]
    time.sleep(LEASE_TTL + 0.2)  # the dead process's lease expires
    rerun = subprocess.run([*argv, "run"], env=ENV, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.strip() == "output: checked a, b and c"
    assert log.read_text("utf-8").splitlines()[len(before) :] == ["tool slow c", "model 1"]
    assert select(db, "SELECT status FROM agent_runs") == [("completed",)]
    steps = select(
        db,
        "SELECT sequence, input_json FROM operations WHERE step_id LIKE '%tool.call'",
    )
    assert {sequence: json.loads(text)["tool_call_id"] for sequence, text in steps} == {
        0: "c-a",
        1: "c-b",
        2: "c-c",
    }
    seqs = [seq for (seq,) in select(db, "SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
