"""ZincirDurability: identities, replay, drift, ownership, failures and bind errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent, ModelRetry  # noqa: E402
from pydantic_ai.durable_exec import (  # noqa: E402
    CapabilityOperationId,
    EventStreamHandlerId,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    ToolsetCallToolId,
    ToolsetGetInstructionsId,
    ToolsetGetToolsId,
    ToolsetValidateToolArgumentsId,
)
from pydantic_ai.exceptions import UserError  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

import zincir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers import rows, select  # noqa: E402
from tests.integrations.pydantic_ai.worker import LEASE_TTL  # noqa: E402
from zincir import (  # noqa: E402
    InputDrift,
    LeaseHeld,
    OperationFailed,
    OperationKind,
    RetryPolicy,
    RunCancelled,
    RunTerminal,
)
from zincir.integrations.pydantic_ai import ZincirDurability, classify  # noqa: E402

WORKER = Path(__file__).with_name("worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
FAST = RetryPolicy(max_attempts=3, initial_interval=0.01, max_interval=0.02)


def operations(db: Path, run_id: str) -> list[tuple[str, int, str, str]]:
    """(step_id, sequence, kind, operation name) of a run's operations, in claim order."""
    return [
        (step, sequence, kind, json.loads(document).get("operation", ""))
        for step, sequence, kind, document in rows(
            db,
            "SELECT step_id, sequence, kind, input_json FROM operations WHERE run_id = ? "
            "ORDER BY rowid",
            (run_id,),
        )
    ]


def scripted(calls: Counter[str]) -> FunctionModel:
    """Looks the order up, refunds it, answers; counts its calls."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        number = sum(isinstance(message, ModelResponse) for message in messages)
        if number == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": "A-17"}, "c1")])
        if number == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17"}, "c2")])
        return ModelResponse(parts=[TextPart("Refunded 4200 cents for A-17.")])

    return FunctionModel(model)


def support_agent(store: Any, calls: Counter[str], **options: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        scripted(calls),
        name="support",
        capabilities=[ZincirDurability(store, retry=FAST, **options)],
    )

    @agent.tool_plain
    def lookup(order: str) -> dict[str, object]:
        """Look an order up."""
        calls["lookup"] += 1
        return {"order": order, "paid_cents": 4200}

    @agent.tool_plain
    def refund(order: str) -> dict[str, object]:
        """Refund an order."""
        calls["refund"] += 1
        return {"refunded_cents": 4200}

    return agent


# -- identity mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation_id", "role", "kind", "step"),
    [
        (ModelRequestId(model_name="m"), "model", OperationKind.MODEL_REQUEST, "model.request"),
        (
            ModelRequestId(model_name="m", streaming=True),
            "model",
            OperationKind.MODEL_STREAM,
            "model.stream",
        ),
        (ModelCompactMessagesId(model_name="m"), "model", "model_request", "model.compact"),
        (ModelCancelSuspendedResponseId(model_name="m"), "model", "model_request", "model.cancel"),
        (ToolsetCallToolId("function", toolset_id="t"), "tool", "tool_call", "tool.call"),
        (ToolsetCallToolId("dynamic", toolset_id="t"), "tool", "tool_call", "tool.call"),
        (ToolsetCallToolId("mcp", toolset_id="t"), "tool", "mcp_request", "mcp.request"),
        (
            ToolsetValidateToolArgumentsId("function", toolset_id="t"),
            "tool",
            "tool_call",
            "tool.validate",
        ),
        (ToolsetGetToolsId("mcp", toolset_id="t"), "tool", "mcp_request", "mcp.discover"),
        (ToolsetGetInstructionsId("t"), "tool", "mcp_request", "mcp.discover"),
        (ToolsetGetToolsId("dynamic", toolset_id="t"), "tool", "tool_call", "tool.discover"),
        (EventStreamHandlerId(), "event", "event_delivery", "event.delivery"),
        (
            CapabilityOperationId("search", operation="run"),
            "capability",
            "tool_call",
            "capability.search.run",
        ),
        ("a-future-id", "model", "model_request", "op"),
        ("a-future-id", "event", "event_delivery", "op"),
        ("a-future-id", "capability", "tool_call", "op"),
    ],
)
def test_each_operation_id_maps_to_its_kind_and_step(
    operation_id: Any, role: str, kind: str, step: str
) -> None:
    assert classify(operation_id, role) == (OperationKind(kind), step)


async def test_a_reference_agent_pins_its_step_ids_and_operation_names(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        result = await support_agent(store, calls).run("Refund order A-17.", run_id="ref-1")
    assert result.output == "Refunded 4200 cents for A-17."
    assert operations(db_path, "ref-1") == [
        ("pydantic_ai.support.model.request", 0, "model_request", "support__model.request"),
        (
            "pydantic_ai.support.tool.call",
            0,
            "tool_call",
            "support__function_toolset__<agent>.call_tool:lookup",
        ),
        ("pydantic_ai.support.model.request", 1, "model_request", "support__model.request"),
        (
            "pydantic_ai.support.tool.call",
            1,
            "tool_call",
            "support__function_toolset__<agent>.call_tool:refund",
        ),
        ("pydantic_ai.support.model.request", 2, "model_request", "support__model.request"),
    ]
    assert rows(db_path, "SELECT DISTINCT handler_id FROM operations") == [("pydantic-ai.support",)]
    document = json.loads(
        rows(db_path, "SELECT input_json FROM operations WHERE step_id LIKE '%tool.call'")[0][0]
    )
    assert document == {
        "operation": "support__function_toolset__<agent>.call_tool:lookup",
        "tool": "lookup",
        "args": {"order": "A-17"},
        "tool_call_id": "c1",
        "approved": False,
    }
    status = rows(db_path, "SELECT status, name, provider, lease_owner FROM agent_runs")
    assert status == [("completed", "support", "pydantic-ai", None)]


# -- replay ----------------------------------------------------------------------------------


async def test_a_second_run_with_the_same_run_id_calls_no_model_or_tool(store_target: str) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(store_target) as store:
        agent = support_agent(store, calls)
        first = await agent.run("Refund order A-17.", run_id="again-1")
        assert calls == Counter(model=3, lookup=1, refund=1)
        second = await agent.run("Refund order A-17.", run_id="again-1")
    assert calls == Counter(model=3, lookup=1, refund=1)
    assert second.output == first.output == "Refunded 4200 cents for A-17."
    responses = [
        [m.parts for m in result.all_messages() if isinstance(m, ModelResponse)]
        for result in (first, second)
    ]
    assert responses[0] == responses[1]  # request-side timestamps are this run's own
    assert select(store_target, "SELECT status FROM agent_runs") == [("completed",)]
    assert select(store_target, "SELECT COUNT(*) FROM operations WHERE status = 'completed'") == [
        (5,)
    ]


async def test_a_cancelled_or_failed_run_id_is_refused_before_any_model_call(
    db_path: Path,
) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent = support_agent(store, calls)
        for run_id in ("stopped-1", "broken-1"):
            ctx = await zincir.AgentContext.create(store, "support", run_id=run_id)
            await ctx.close()
        await zincir.cancel_run(store, "stopped-1")
        ctx = await zincir.AgentContext.recover(store, "broken-1")
        await ctx.fail("gave up")
        before = rows(db_path, "SELECT COUNT(*) FROM events")
        with pytest.raises(RunCancelled, match=r"\[run stopped-1\] the run was cancelled"):
            await agent.run("Refund order A-17.", run_id="stopped-1")
        with pytest.raises(RunTerminal, match=r"\[run broken-1\] the run is failed") as failed:
            await agent.run("Refund order A-17.", run_id="broken-1")
        assert not isinstance(failed.value, RunCancelled)
    assert calls == Counter()
    assert rows(db_path, "SELECT COUNT(*) FROM events") == before


async def test_a_changed_prompt_under_the_same_run_id_raises_input_drift(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent = support_agent(store, calls)
        await agent.run("Refund order A-17.", run_id="drift-1")
        with pytest.raises(InputDrift, match="drift-1") as caught:
            await agent.run("Refund order B-2.", run_id="drift-1")
    assert "pydantic_ai.support.model.request" in str(caught.value)
    assert calls["model"] == 3


@pytest.mark.crash
def test_sigkill_after_the_second_tool_call_reruns_only_the_model_request_in_flight(
    store_target: str, tmp_path: Path
) -> None:
    db, log = store_target, tmp_path / "calls.log"
    argv = [sys.executable, str(WORKER), str(db), str(log), "kill-1"]
    killed = subprocess.run([*argv, "kill"], env=ENV, capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = log.read_text("utf-8").splitlines()
    assert before == ["model 0", "tool lookup A-17", "model 1", "tool refund A-17", "model 2"]
    time.sleep(LEASE_TTL + 0.2)  # the dead process's lease expires
    rerun = subprocess.run([*argv, "run"], env=ENV, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.strip() == "output: Refunded 4200 cents for A-17."
    lines = log.read_text("utf-8").splitlines()
    assert lines[len(before) :] == ["model 2"]
    assert lines.count("tool lookup A-17") == 1 and lines.count("tool refund A-17") == 1
    assert select(db, "SELECT status FROM agent_runs") == [("completed",)]
    seqs = [seq for (seq,) in select(db, "SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))


# -- ownership -------------------------------------------------------------------------------


async def test_two_runs_under_gather_keep_separate_identities(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent = support_agent(store, calls)
        one, two = await asyncio.gather(
            agent.run("Refund order A-17.", run_id="pair-1"),
            agent.run("Refund order A-17.", run_id="pair-2"),
        )
    assert one.output == two.output == "Refunded 4200 cents for A-17."
    assert calls == Counter(model=6, lookup=2, refund=2)
    first, second = operations(db_path, "pair-1"), operations(db_path, "pair-2")
    assert [op[:2] for op in first] == [op[:2] for op in second]
    assert [op[:2] for op in first] == [
        ("pydantic_ai.support.model.request", 0),
        ("pydantic_ai.support.tool.call", 0),
        ("pydantic_ai.support.model.request", 1),
        ("pydantic_ai.support.tool.call", 1),
        ("pydantic_ai.support.model.request", 2),
    ]


@pytest.mark.crash
async def test_a_second_process_on_one_run_id_is_refused(store_target: str, tmp_path: Path) -> None:
    db, log = store_target, tmp_path / "calls.log"
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), str(log), "held-1", "hold"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{log}.started").exists():
            assert holder.poll() is None and time.monotonic() < deadline
            await asyncio.sleep(0.02)
        calls: Counter[str] = Counter()
        async with zincir.open_store(db) as store:
            with pytest.raises(LeaseHeld, match="held-1"):
                await support_agent(store, calls).run("Refund order A-17.", run_id="held-1")
        assert calls == Counter()
        Path(f"{log}.release").touch()
        out, err = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, err
    assert out.strip() == "output: Refunded 4200 cents for A-17."


# -- failures --------------------------------------------------------------------------------


async def test_model_retry_replays_as_a_value(db_path: Path) -> None:
    tries: Counter[str] = Counter()
    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            TestModel(), name="checker", capabilities=[ZincirDurability(store, retry=FAST)]
        )

        @agent.tool_plain
        def check(order: str) -> str:
            """Check an order."""
            tries["check"] += 1
            if tries["check"] == 1:
                raise ModelRetry("try again")
            return "ok"

        first = await agent.run("check", run_id="retry-1")
        again = await agent.run("check", run_id="retry-1")
    assert tries["check"] == 2 and again.output == first.output
    documents = rows(
        db_path, "SELECT record FROM operations WHERE step_id LIKE '%tool.call' ORDER BY sequence"
    )
    output = json.loads(json.loads(documents[0][0])["outcome"]["success"]["output_json"])
    assert output == {"value": {"message": "try again", "kind": "model_retry"}}


async def test_a_runtime_error_is_retried_under_a_new_sequence_and_not_terminal(
    db_path: Path,
) -> None:
    failures = {"left": 4}  # the runtime's 3 attempts, then one more under sequence 1

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("provider outage")
        return ModelResponse(parts=[TextPart("back")])

    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            FunctionModel(model), name="flaky", capabilities=[ZincirDurability(store, retry=FAST)]
        )
        result = await agent.run("hi", run_id="flaky-1")
    assert result.output == "back"
    assert [op[:3] for op in operations(db_path, "flaky-1")] == [
        ("pydantic_ai.flaky.model.request", 0, "model_request"),
        ("pydantic_ai.flaky.retry.delay", 0, "retry_delay"),
        ("pydantic_ai.flaky.model.request", 1, "model_request"),
    ]
    first = json.loads(rows(db_path, "SELECT record FROM operations ORDER BY rowid")[0][0])
    assert first["outcome"]["failure"]["retryable"] is True
    assert rows(db_path, "SELECT status FROM agent_runs") == [("completed",)]


async def test_an_outage_that_outlasts_the_retries_reraises_and_leaves_the_run_recoverable(
    db_path: Path,
) -> None:
    down = {"on": True}

    class Outage(RuntimeError):
        """The provider is down."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if down["on"]:
            raise Outage("503 from the provider")
        return ModelResponse(parts=[TextPart("recovered")])

    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            FunctionModel(model), name="down", capabilities=[ZincirDurability(store, retry=FAST)]
        )
        with pytest.raises(Outage, match="503"):  # the original exception, in this process
            await agent.run("hi", run_id="down-1")
        assert rows(db_path, "SELECT status, lease_owner FROM agent_runs") == [("running", None)]
        down["on"] = False
        result = await agent.run("hi", run_id="down-1")
    assert result.output == "recovered"
    assert rows(db_path, "SELECT status FROM agent_runs") == [("completed",)]


async def test_an_unserializable_tool_result_is_a_non_retryable_failure(db_path: Path) -> None:
    calls: Counter[str] = Counter()

    class Opaque:
        """No JSON form."""

        def __init__(self) -> None:
            self.handle = object()

    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            TestModel(), name="opaque", capabilities=[ZincirDurability(store, retry=FAST)]
        )

        @agent.tool_plain
        def fetch() -> Any:
            """Fetch a handle."""
            calls["fetch"] += 1
            return Opaque()

        with pytest.raises(OperationFailed) as caught:
            await agent.run("go", run_id="opaque-1")
    assert calls["fetch"] == 1  # not retried
    assert caught.value.retryable is False
    record = json.loads(
        rows(db_path, "SELECT record FROM operations WHERE step_id LIKE '%tool.call'")[0][0]
    )
    assert record["outcome"]["failure"]["retryable"] is False
    assert rows(db_path, "SELECT status FROM agent_runs") == [("failed",)]


# -- bind errors -----------------------------------------------------------------------------


async def test_bind_errors(db_path: Path) -> None:
    async with zincir.open_store(db_path) as store:
        with pytest.raises(UserError, match="unique `name`"):
            await Agent(TestModel(), capabilities=[ZincirDurability(store)]).run("x", run_id="b1")
        idless = FunctionToolset[None]()

        @idless.tool_plain
        def ping() -> str:
            return "pong"

        with pytest.raises(UserError, match="unique `id`"):
            Agent(TestModel(), name="b", toolsets=[idless], capabilities=[ZincirDurability(store)])
        agent: Agent[None, str] = Agent(
            TestModel(), name="b", capabilities=[ZincirDurability(store)]
        )
        extra = FunctionToolset[None](id="extra")
        extra.tool_plain(ping)
        with pytest.raises(UserError, match="per-run|run time|runtime|added"):
            await agent.run("x", run_id="b2", toolsets=[extra])
        with pytest.raises(UserError, match="run_id"):
            await agent.run("x")
        with pytest.raises(UserError, match="registered|models="):
            await agent.run("x", run_id="b3", model=TestModel())
    with pytest.raises(zincir.InvalidInput, match="store"):
        ZincirDurability()
