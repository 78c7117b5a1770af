"""Approvals and external results: pause, decide, resume — in process and across a restart."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.approval_worker import PROMPT, binding, build
from tests.agent.reference import call, lines
from tests.conftest import REPO
from tests.helpers import select
from zincir.agent import (
    Agent,
    Approve,
    Deny,
    ExternalResult,
    FunctionModel,
    PausedRun,
    args_sha256,
    current_approval,
    tool,
)
from zincir.payloads import ApprovalDecision, ApprovalRequest, ModelRequest, ModelResponse, TextPart
from zincir.store import Store

WORKER = Path(__file__).with_name("approval_worker.py")
RUN = "appr-run"


def pause_in_subprocess(db: str, log: Path) -> None:
    """A separate process runs the agent until it pauses, then exits."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(WORKER), db, str(log), RUN],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "paused c-refund c-ship\n"


@pytest.fixture
async def paused(store_target: str, tmp_path: Path) -> AsyncIterator[tuple[str, Path, Store]]:
    """A separate process paused the run on ``store_target``; a store open on it here."""
    db, log = store_target, tmp_path / "log"
    pause_in_subprocess(db, log)
    assert sorted(lines(log)) == ["lookup A-17", "model 0", "ship A-17 deferred"]
    store = zincir.open_store(db)
    yield db, log, store
    await store.close()


def operations(db: str) -> list[tuple[str, int]]:
    return [
        (step, seq)
        for step, seq in select(
            db, "SELECT step_id, sequence FROM operations WHERE run_id = ? ORDER BY 2, 1", (RUN,)
        )
    ]


async def test_the_paused_run_is_rebuilt_in_a_new_process(
    paused: tuple[str, Path, Store],
) -> None:
    db, log, store = paused
    agent = build(log)
    found = await agent.paused_run(durable=binding(agent, store, RUN))
    assert found is not None and found.run_id == RUN and found.prompt == PROMPT
    assert [(c.call_id, c.tool, c.sequence, c.execution) for c in found.calls] == [
        ("c-refund", "refund", 0, "approval"),
        ("c-ship", "ship", 2, "external"),
    ]
    refund = found.calls[0]
    assert dict(refund.arguments) == {"order_id": "A-17", "amount_cents": 500}
    assert refund.args_sha256 == args_sha256({"amount_cents": 500, "order_id": "A-17"})
    assert [p.tool_call_id for p in found.completed] == ["c-lookup"]
    # Running the paused run again returns the same pause and calls nothing.
    again = await agent.run(PROMPT, durable=binding(agent, store, RUN))
    assert again.paused == found
    assert len(lines(log)) == 3
    pending = select(
        db, "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'agent_paused'", (RUN,)
    )
    assert pending == [(1,)]


async def test_approve_and_external_result_after_a_restart(
    paused: tuple[str, Path, Store],
) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    result = await agent.resume(
        found,
        {"c-refund": Approve(), "c-ship": ExternalResult({"tracking": "T-1"})},
        durable=bound,
    )
    assert result.paused is None
    assert result.output == (
        "results: [{'refunded': 500}, {'order': 'A-17', 'status': 'delivered'}, "
        "{'tracking': 'T-1'}]"
    )
    assert lines(log)[3:] == ["refund A-17 500", "model 1"]
    assert ("approval.resume", 0) in operations(db) and ("approval.resume", 2) in operations(db)
    request = select(
        db,
        "SELECT input_json FROM operations WHERE step_id = 'approval.resume' AND sequence = 0",
    )[0][0]
    assert ApprovalRequest.from_json(request).proposed.decision == "approve"
    assert await agent.paused_run(durable=bound) is None
    # The same decisions again: the stored output, nothing called.
    same = await agent.resume(
        found, {"c-refund": Approve(), "c-ship": ExternalResult({"tracking": "T-1"})}, durable=bound
    )
    assert same.output == result.output and lines(log)[3:] == ["refund A-17 500", "model 1"]


async def test_deny(paused: tuple[str, Path, Store]) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    result = await agent.resume(
        found, {"c-refund": Deny("too much"), "c-ship": Deny()}, durable=bound
    )
    assert "too much" in result.output and "The tool call was denied." in result.output
    assert not any(line.startswith("refund") for line in lines(log))


async def test_override_arguments(paused: tuple[str, Path, Store]) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    override = {"order_id": "A-17", "amount_cents": 300}
    result = await agent.resume(
        found,
        {"c-refund": Approve(override_arguments=override), "c-ship": ExternalResult(None)},
        durable=bound,
    )
    assert result.paused is None and "{'refunded': 300}" in result.output
    assert "refund A-17 300" in lines(log)
    tool_input = select(
        db, "SELECT input_json FROM operations WHERE step_id = 'tool.call' AND sequence = 0"
    )[0][0]
    sent = json.loads(tool_input)
    assert sent["arguments"] == override and sent["approval"]["decision"] == "approve"
    decided = {  # the calls are decided concurrently: find each by its call id
        body["call_id"]: body
        for (payload,) in select(
            db, "SELECT payload FROM events WHERE run_id = ? AND type = 'approval_decided'", (RUN,)
        )
        for body in [json.loads(payload)]
    }
    assert decided["c-refund"]["args_sha256"] == args_sha256(override)


async def test_an_override_that_fails_the_schema_is_refused_with_nothing_stored(
    paused: tuple[str, Path, Store],
) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    before = operations(db)
    with pytest.raises(zincir.InvalidInput, match="fail its schema"):
        await agent.resume(
            found, {"c-refund": Approve(override_arguments={"amount_cents": "lots"})}, durable=bound
        )
    assert operations(db) == before


async def test_a_changed_argument_is_refused(paused: tuple[str, Path, Store]) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    changed = {"order_id": "A-17", "amount_cents": 90000}
    # The arguments edited, the digest left: the paused call no longer matches itself.
    tampered = dataclasses.replace(
        found, calls=(dataclasses.replace(found.calls[0], arguments=changed), found.calls[1])
    )
    with pytest.raises(zincir.ApprovalMismatch, match="args_sha256"):
        await agent.resume(tampered, {"c-refund": Approve()}, durable=bound)
    # Both edited: the run would run other arguments than the ones approved.
    forged = dataclasses.replace(
        found,
        calls=(
            dataclasses.replace(
                found.calls[0], arguments=changed, args_sha256=args_sha256(changed)
            ),
            found.calls[1],
        ),
    )
    with pytest.raises(zincir.ApprovalMismatch, match="decision was made for"):
        await agent.resume(forged, {"c-refund": Approve()}, durable=bound)
    assert not any(line.startswith("refund") for line in lines(log))
    assert ("approval.resume", 0) not in operations(db)
    # Approved again on the run's own arguments, it goes through.
    result = await agent.resume(
        found, {"c-refund": Approve(), "c-ship": ExternalResult(1)}, durable=bound
    )
    assert result.paused is None and "refund A-17 500" in lines(log)


async def test_a_conflicting_second_proposal_fails_closed(
    paused: tuple[str, Path, Store],
) -> None:
    db, log, store = paused
    agent = build(log)
    bound = binding(agent, store, RUN)
    found = await agent.paused_run(durable=bound)
    assert found is not None
    # Only the refund decided: it runs, and the run pauses again on the shipment.
    partly = await agent.resume(found, {"c-refund": Approve()}, durable=bound)
    assert partly.paused is not None and [c.call_id for c in partly.paused.calls] == ["c-ship"]
    assert lines(log).count("refund A-17 500") == 1
    for conflicting in (
        Deny("changed my mind"),
        Approve(override_arguments={"order_id": "B", "amount_cents": 1}),
    ):
        with pytest.raises(zincir.ApprovalMismatch, match="already decided"):
            await agent.resume(found, {"c-refund": conflicting}, durable=bound)
    # In a new process, too: rebuilt from the log, the refund stays decided.
    rebuilt = await build(log).paused_run(durable=bound)
    assert rebuilt is not None and [c.call_id for c in rebuilt.calls] == ["c-ship"]
    done = await agent.resume(rebuilt, {"c-ship": ExternalResult("sent")}, durable=bound)
    assert done.paused is None and lines(log).count("refund A-17 500") == 1
    with pytest.raises(zincir.ApprovalMismatch):
        await agent.resume(found, {"c-refund": Deny()}, durable=bound)


async def test_the_approver_of_serve_decides(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "log"
    agent = build(log)

    def approver(request: ApprovalRequest) -> ApprovalDecision:
        if request.execution == "external":
            return request.proposed
        return ApprovalDecision(decision="deny", reason="policy: no refunds")

    registry = zincir.HandlerRegistry()
    from tests.agent.approval_worker import HANDLERS
    from zincir.agent import DurableBinding, serve

    serve(registry, agent, HANDLERS, approver=approver)
    bound = DurableBinding(zincir.LocalRuntime(store, registry), "r", HANDLERS)
    first = await agent.run(PROMPT, durable=bound)
    assert first.paused is not None
    result = await agent.resume(
        first.paused, {"c-refund": Approve(), "c-ship": ExternalResult(2)}, durable=bound
    )
    assert "policy: no refunds" in result.output
    assert not any(line.startswith("refund") for line in lines(log))


async def test_direct_pause_and_resume(tmp_path: Path) -> None:
    log = tmp_path / "log"
    agent = build(log)
    first = await agent.run(PROMPT)
    assert first.paused is not None and first.paused.run_id is None
    with pytest.raises(zincir.InvalidInput, match="Approve or Deny"):
        await agent.resume(first.paused, {"c-refund": ExternalResult(1)})
    with pytest.raises(zincir.InvalidInput, match="ExternalResult or Deny"):
        await agent.resume(first.paused, {"c-ship": Approve()})
    result = await agent.resume(
        first.paused, {"c-refund": Approve(), "c-ship": ExternalResult({"t": 1})}
    )
    assert result.paused is None and "{'refunded': 500}" in result.output
    assert sorted(lines(log)[:3]) == ["lookup A-17", "model 0", "ship A-17 deferred"]
    assert lines(log)[3:] == ["refund A-17 500", "model 1"]


async def test_a_tool_raising_approval_required_runs_once_approved(
    store: Store, store_url: str
) -> None:
    ran: list[Any] = []

    @tool
    def transfer(amount: int) -> str:
        decision = current_approval()
        if decision is None and amount > 100:
            raise zincir.ApprovalRequired("large transfer")
        ran.append((amount, None if decision is None else decision.decision))
        return "sent"

    def model(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(parts=[TextPart(text="ok")])
        return ModelResponse(parts=[call("t1", "transfer", amount=500)])

    agent = Agent(FunctionModel(model), tools=[transfer])
    first = await agent.run("go")
    assert first.paused is not None and first.paused.calls[0].execution == "approval"
    assert ran == []
    assert (await agent.resume(first.paused, {"t1": Approve()})).output == "ok"
    assert ran == [(500, "approve")]

    from zincir.agent import DurableBinding, Handlers, serve

    handlers = Handlers(model_request="m", tool_call="t", approval_resume="a")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    bound = DurableBinding(zincir.LocalRuntime(store, registry), "rr", handlers)
    paused_run = (await agent.run("go", durable=bound)).paused
    assert isinstance(paused_run, PausedRun) and paused_run.calls[0].sequence == 0
    assert (await agent.resume(paused_run, {"t1": Approve()}, durable=bound)).output == "ok"
    assert ran == [(500, "approve"), (500, "approve")]
    steps = select(
        store_url,
        "SELECT step_id, sequence FROM operations WHERE run_id = 'rr' ORDER BY 2, 1",
    )
    assert steps == [
        ("approval.resume", 0),
        ("model.request", 0),
        ("tool.call", 0),
        ("model.request", 1),
        ("tool.call", 10**12),
    ]


async def test_two_pauses_in_one_run_keep_the_first_decisions(store: Store) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def act(step: int) -> int:
        ran.append(f"act {step}")
        return step

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for m in request.messages if m.role == "assistant")
        if number < 2:
            return ModelResponse(parts=[call(f"a{number}", "act", step=number)])
        return ModelResponse(parts=[TextPart(text=f"done {len(ran)}")])

    agent = Agent(FunctionModel(model), tools=[act])
    from zincir.agent import DurableBinding, Handlers, serve

    handlers = Handlers(model_request="m", tool_call="t", approval_resume="a")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    bound = DurableBinding(zincir.LocalRuntime(store, registry), "two", handlers)
    first = (await agent.run("go", durable=bound)).paused
    assert first is not None and first.request_number == 0
    second = (await agent.resume(first, {"a0": Deny("not now")}, durable=bound)).paused
    assert second is not None and second.request_number == 1
    assert await agent.paused_run(durable=bound) == second
    done = await agent.resume(second, {"a1": Approve()}, durable=bound)
    assert done.output == "done 1" and ran == ["act 1"]
