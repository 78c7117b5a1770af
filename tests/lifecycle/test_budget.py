"""Budgets: usage read from the run's log (never counted twice), enforced before the next
model request or tool call, across restarts and SIGKILLs, paused or failed as chosen, and
resumed once raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.helpers import select
from tests.lifecycle.budget_worker import LEASE_TTL
from zincir import (
    AgentContext,
    Budget,
    BudgetExceeded,
    InvalidInput,
    ToolCall,
    set_budget,
)
from zincir.store import Store
from zincir.testing import FakeClock

WORKER = Path(__file__).with_name("budget_worker.py")
USAGE = {"input_tokens": 30, "output_tokens": 20}


def test_bad_budgets_are_refused() -> None:
    for bad in (
        {"tokens": -1},
        {"tool_calls": 1.5},
        {"model_requests": "3"},
        {"wall_time": 0},
        {"wall_time": timedelta(seconds=-5)},
        {"on_exceed": "explode"},
    ):
        with pytest.raises(InvalidInput):
            Budget(**bad)
    assert Budget(wall_time=90).wall_time == timedelta(seconds=90)


async def test_a_bad_budget_creates_nothing(store: Store) -> None:
    with pytest.raises(InvalidInput):
        await AgentContext.create(store, "agent", run_id="r", budget={"tokens": 5})  # type: ignore[arg-type]
    assert await store.get_run("r") is None
    with pytest.raises(InvalidInput):
        await set_budget(store, "r", {"tokens": 5})  # type: ignore[arg-type]


async def test_usage_is_read_from_the_log_and_pauses_the_run(store: Store) -> None:
    ctx = await AgentContext.create(
        store, "agent", run_id="r", budget=Budget(tokens=120, tool_calls=3)
    )
    for turn in range(2):
        await ctx.check_budget("model")
        await ctx.record_response("", [ToolCall(f"c{turn}", "lookup", {})], usage=USAGE)
        await ctx.check_budget("tools")
        await ctx.record_tool_result(f"c{turn}", {"ok": True})
    budget, usage = await ctx.budget_usage()
    assert budget == Budget(tokens=120, tool_calls=3)
    assert (usage.tokens, usage.tool_calls, usage.model_requests) == (100, 2, 2)
    await ctx.check_budget("model")  # 100 of 120 tokens: one more request may go
    await ctx.record_response(
        "", [ToolCall("c2", "lookup", {}), ToolCall("c3", "x", {})], usage=USAGE
    )
    with pytest.raises(BudgetExceeded) as raised:
        await ctx.check_budget("tools")  # 4 tool calls of 3
    assert raised.value.exceeded == ["tool_calls"]
    assert raised.value.usage.tool_calls == 4
    assert "r" in str(raised.value)
    run = await store.get_run("r")
    assert run is not None and (run["wait_kind"], run["wait_ref"]) == ("message", "zincir.budget")
    events = [(e.type, e.payload) for e in await store.list_events("r")]
    assert events[1] == ("budget_set", Budget(tokens=120, tool_calls=3).to_dict())
    assert events[-1][0] == "budget_exceeded"
    assert events[-1][1]["exceeded"] == ["tool_calls"]
    await ctx.close()

    # A new owner reads the same usage back: nothing is counted twice.
    again = await AgentContext.recover(store, "r")
    _, replayed = await again.budget_usage()
    assert (replayed.tokens, replayed.tool_calls, replayed.model_requests) == (150, 4, 3)
    with pytest.raises(BudgetExceeded):
        await again.check_budget("tools")
    await again.close()

    # Raised from outside: the parked run is unparked and its next check passes.
    await set_budget(store, "r", Budget(tokens=1000, tool_calls=10))
    run = await store.get_run("r")
    assert run is not None and run["wait_kind"] is None
    resumed = await AgentContext.recover(store, "r")
    await resumed.check_budget("tools")
    await resumed.check_budget("model")
    await resumed.close()


async def test_fail_policy_fails_the_run(store: Store) -> None:
    ctx = await AgentContext.create(
        store, "agent", run_id="f", budget=Budget(model_requests=1, on_exceed="fail")
    )
    await ctx.record_response("one", [], usage=USAGE)
    with pytest.raises(BudgetExceeded):
        await ctx.check_budget("model")
    run = await store.get_run("f")
    assert run is not None and run["status"] == "failed"
    assert "model_requests 1 of 1" in str(run["last_error"])


async def test_wall_time_counts_from_the_run_creation(fake_store: Store, clock: FakeClock) -> None:
    ctx = await AgentContext.create(fake_store, "agent", run_id="w", budget=Budget(wall_time=60))
    await ctx.close()
    clock.advance(59)
    fresh = await AgentContext.recover(fake_store, "w")  # a new process: the clock goes on
    await fresh.check_budget("model")
    clock.advance(2)
    with pytest.raises(BudgetExceeded) as raised:
        await fresh.check_budget("step")
    assert raised.value.exceeded == ["wall_time"]
    await fresh.close()


def _run_worker(db: str, log: Path, run_id: str, tokens: int, crash: str | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    env.pop("ZINCIR_CRASH_AT", None)
    if crash is not None:
        env["ZINCIR_CRASH_AT"] = crash
    done = subprocess.run(
        [sys.executable, str(WORKER), db, str(log), run_id, str(tokens)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if crash is not None:
        assert done.returncode == -9, done.stderr
        return ""
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _usage_of(db: str, run_id: str) -> dict[str, Any]:
    rows = select(db, "SELECT type, payload FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    tokens = calls = requests = 0
    for kind, payload in rows:
        body = json.loads(payload)
        if kind == "llm_call":
            requests += 1
            tokens += body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
        elif kind == "tool_call":
            calls += 1
    return {"tokens": tokens, "tool_calls": calls, "model_requests": requests}


@pytest.mark.crash
def test_budget_across_a_sigkill(store_target: str, tmp_path: Path) -> None:
    db = store_target
    calm, crashed = tmp_path / "calm.log", tmp_path / "crashed.log"
    first = _run_worker(db, calm, "calm", 450)
    assert first.startswith("budget ")
    # Killed as the third response is logged, then run again to the end of its budget.
    _run_worker(db, crashed, "crashed", 450, crash="agent.response_logged:3")
    time.sleep(LEASE_TTL + 0.2)  # the dead process's lease expires
    second = _run_worker(db, crashed, "crashed", 450)
    assert second.startswith("budget ")
    # Usage after the crash and replay equals usage without the crash.
    assert _usage_of(db, "crashed") == _usage_of(db, "calm")
    assert _usage_of(db, "calm") == {"tokens": 500, "tool_calls": 5, "model_requests": 5}
    calm_calls = calm.read_text().split("\n")
    crashed_calls = crashed.read_text().split("\n")
    models = [line for line in crashed_calls if line.startswith("model")]
    # No overrun beyond the budget: five requests logged, at most one repeated by the crash.
    assert len(models) <= len([line for line in calm_calls if line.startswith("model")]) + 1
    assert sorted(set(models)) == [f"model {n}" for n in range(5)]
    # Raising the budget resumes the paused run from where it stopped.
    third = _run_worker(db, crashed, "crashed", 2500)
    assert third == "output done"
    models = [line for line in crashed.read_text().split("\n") if line.startswith("model")]
    assert sorted(set(models), key=lambda line: int(line.split()[1])) == [
        f"model {n}" for n in range(21)
    ]


async def test_a_workflow_checks_its_budget_before_each_step(
    fake_store: Store, clock: FakeClock
) -> None:
    from zincir import WorkflowContext

    with pytest.raises(InvalidInput):
        await WorkflowContext.open(fake_store, "wf", budget=60)  # type: ignore[arg-type]
    assert await fake_store.get_run("wf") is None
    wf = await WorkflowContext.open(fake_store, "wf", budget=Budget(wall_time=60))
    ran: list[int] = []
    await wf.step("one", lambda: ran.append(1))
    clock.advance(61)
    with pytest.raises(BudgetExceeded):
        await wf.step("two", lambda: ran.append(2))
    assert ran == [1]
    await wf.close()
    # Raised (here by the code that opens it again), the run goes on; "one" replays.
    again = await WorkflowContext.open(fake_store, "wf", budget=Budget(wall_time=3600))
    await again.step("one", lambda: ran.append(1))
    await again.step("two", lambda: ran.append(2))
    assert ran == [1, 2]
    await again.complete()
