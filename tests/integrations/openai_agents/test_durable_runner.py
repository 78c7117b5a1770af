"""DurableRunner on the real OpenAI Agents SDK against the scripted chat-completions server:
crash and re-run, replay, input drift, guardrails, max_turns, concurrent runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is in the dev extra")

from agents import (  # noqa: E402
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    RunContextWrapper,
    input_guardrail,
)
from agents import Runner as SDKRunner  # noqa: E402

import zincir  # noqa: E402
from tests.agent.openai_server import ChatServer, Reply, completion, tool_call  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.integrations.openai_agents.support_agents import (  # noqa: E402
    ANSWER,
    PROMPT,
    model,
    script,
    support,
)
from zincir import InputDrift, RunTerminal  # noqa: E402
from zincir.integrations.openai_agents import DurableRunner, run_id_of  # noqa: E402

WORKER = Path(__file__).with_name("worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def lines(log: Path) -> list[str]:
    return log.read_text("utf-8").splitlines() if log.exists() else []


async def operations(store: zincir.Store, run_id: str) -> list[tuple[str, int]]:
    events = await store.list_events(run_id)
    return [
        (event.payload["step_id"], event.payload["sequence"])
        for event in events
        if event.type == "operation_completed"
    ]


# -- crash and replay ---------------------------------------------------------------------------


@pytest.mark.crash
async def test_a_handoff_run_killed_inside_a_tool_reruns_only_what_had_not_finished(
    store_target: str, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*script())
    argv = [sys.executable, str(WORKER), store_target, server.base_url, str(log), "support-1"]
    killed = await asyncio.to_thread(
        subprocess.run, [*argv, "refund"], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(server.received) == 3  # hand off, look up, refund: killed inside refund
    assert lines(log) == ["tool lookup A-17", "tool refund A-17 started"]
    # No wait for the lease: its owner died on this machine, so the re-run takes it over.
    rerun = await asyncio.to_thread(
        subprocess.run, argv, env=ENV, capture_output=True, text=True, timeout=60
    )
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.strip() == f"output: {ANSWER}"
    assert len(server.received) == 4  # only the answer: no finished model call again
    assert lines(log) == [
        "tool lookup A-17",
        "tool refund A-17 started",  # the call in flight when killed runs again
        "tool refund A-17 started",
        "tool refund A-17 done",
    ]
    async with zincir.open_store(store_target) as store:
        run = await store.get_run("support-1")
        assert run is not None and run["status"] == "completed"
        assert run["provider"] == "openai-agents"
        assert await operations(store, "support-1") == [
            ("openai_agents.model.request", 0),
            ("openai_agents.model.request", 1),
            ("openai_agents.tool.call", 1000),
            ("openai_agents.model.request", 2),
            ("openai_agents.tool.call", 2000),
            ("openai_agents.model.request", 3),
        ]


async def test_a_finished_run_replays_its_result_and_calls_nothing(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), log)
    first = await runner.run(agent, PROMPT, run_id="done-1")
    again = await runner.run(agent, PROMPT, run_id="done-1")
    assert first.final_output == again.final_output == ANSWER
    assert first.last_agent.name == again.last_agent.name == "billing"
    assert [type(item).__name__ for item in again.new_items] == [
        type(item).__name__ for item in first.new_items
    ]
    assert len(server.received) == 4
    assert lines(log) == ["tool lookup A-17", "tool refund A-17 started", "tool refund A-17 done"]
    assert run_id_of(again) == "done-1"
    events = [event.type for event in await store.list_events("done-1")]
    assert events.count("llm_call") == 4 and events.count("tool_result") == 2


async def test_the_same_result_as_the_sdk_without_durability(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script(), *script())
    agent = support(server.client(), tmp_path / "calls.log")
    plain = await SDKRunner.run(agent, PROMPT)
    durable = await DurableRunner(store).run(agent, PROMPT)
    assert durable.final_output == plain.final_output
    assert [type(item).__name__ for item in durable.new_items] == [
        type(item).__name__ for item in plain.new_items
    ]
    assert server.bodies[4:] == server.bodies[:4]  # the same requests, in the same order
    assert await store.get_run(run_id_of(durable)) is not None


async def test_a_changed_input_under_the_same_run_id_is_input_drift(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log")
    await runner.run(agent, PROMPT, run_id="drift-1")
    with pytest.raises(InputDrift) as raised:
        await runner.run(agent, "Refund order B-2.", run_id="drift-1")
    assert raised.value.run_id == "drift-1"
    assert "original input" in str(raised.value)
    assert len(server.received) == 4


async def test_a_changed_tool_argument_of_a_recorded_call_is_input_drift(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    """The model's answer differs on the re-run (the instructions changed): the recorded
    model call no longer stands for it."""
    server.script(*script()[:2])
    server.fallback = Reply(status=500, body={"error": {"message": "down"}})
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log")
    with pytest.raises(Exception):  # noqa: B017 - the outage ends the first attempt
        await runner.run(agent, PROMPT, run_id="drift-2")
    changed = agent.clone(instructions="Route the customer, politely.")
    with pytest.raises(InputDrift) as raised:
        await runner.run(changed, PROMPT, run_id="drift-2")
    assert raised.value.run_id == "drift-2"


# -- behaviour kept from the SDK --------------------------------------------------------------


async def test_a_tripped_input_guardrail_raises_as_without_zincir_and_fails_the_run(
    store: zincir.Store, server: ChatServer
) -> None:
    @input_guardrail(run_in_parallel=False)
    async def no_refunds(
        context: RunContextWrapper[Any], agent: Agent[Any], text: Any
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="refund", tripwire_triggered="Refund" in text)

    server.script(Reply(body=completion("hello")))
    agent = Agent(
        name="guarded",
        model=model(server.client()),
        input_guardrails=[no_refunds],
    )
    with pytest.raises(InputGuardrailTripwireTriggered):
        await SDKRunner.run(agent, PROMPT)
    runner = DurableRunner(store)
    with pytest.raises(InputGuardrailTripwireTriggered):
        await runner.run(agent, PROMPT, run_id="guard-1")
    run = await store.get_run("guard-1")
    assert run is not None and run["status"] == "failed"
    assert "InputGuardrailTripwireTriggered" in str(run["last_error"])
    with pytest.raises(RunTerminal) as raised:
        await runner.run(agent, PROMPT, run_id="guard-1")
    assert raised.value.run_id == "guard-1"
    assert len(server.received) == 0
    answered = await runner.run(agent, "Hello there.", run_id="guard-2")
    assert answered.final_output == "hello"


async def test_max_turns_raises_as_without_zincir(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    agent = support(server.client(), tmp_path / "calls.log")
    with pytest.raises(MaxTurnsExceeded):
        await DurableRunner(store).run(agent, PROMPT, run_id="turns-1", max_turns=2)
    run = await store.get_run("turns-1")
    assert run is not None and run["status"] == "failed"
    assert len(server.received) == 2


# -- concurrency --------------------------------------------------------------------------------


class ByConversation:
    """Replies chosen by the request's last message, so runs side by side get theirs
    whatever order their requests arrive in."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server

    def __bool__(self) -> bool:
        return True

    def clear(self) -> None:
        pass

    def popleft(self) -> Reply:
        messages = self.server.received[-1].body["messages"]
        last = messages[-1]
        if last["role"] == "user":
            order = last["content"].split()[-1].rstrip(".")
            arguments = json.dumps({"order": order})
            return Reply(body=completion(None, [tool_call(f"c-{order}", "lookup", arguments)]))
        return Reply(body=completion(f"looked up: {last['content']}"))


async def test_runs_under_gather_keep_their_own_identities(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    scripted = server.replies
    server.replies = ByConversation(server)  # type: ignore[assignment]
    try:
        await gathered(store, server, tmp_path / "calls.log")
    finally:
        server.replies = scripted  # the module's other tests script their replies


async def gathered(store: zincir.Store, server: ChatServer, log: Path) -> None:
    billing = support(server.client(), log).handoffs[0]
    assert isinstance(billing, Agent)
    runner = DurableRunner(store)
    orders = [f"A-{n}" for n in range(6)]
    results = await asyncio.gather(
        *(runner.run(billing, f"Look up {order}.", run_id=f"pair-{order}") for order in orders)
    )
    for order, result in zip(orders, results, strict=True):
        assert result.final_output == f"looked up: order {order}: paid 4200 cents"
        assert await operations(store, f"pair-{order}") == [
            ("openai_agents.model.request", 0),
            ("openai_agents.tool.call", 0),
            ("openai_agents.model.request", 1),
        ]
    assert sorted(lines(log)) == sorted(f"tool lookup {order}" for order in orders)
    again = await asyncio.gather(
        *(runner.run(billing, f"Look up {order}.", run_id=f"pair-{order}") for order in orders)
    )
    assert [r.final_output for r in again] == [r.final_output for r in results]
    assert len(server.received) == 12


def test_the_module_exports_are_pinned() -> None:
    import zincir.integrations.openai_agents as module
    from tests.conftest import dunder_all_order

    assert module.__all__ == [
        "APPROVAL_RESUME",
        "MCP_REQUEST",
        "MODEL_REQUEST",
        "MODEL_STREAM",
        "TOOL_CALL",
        "DurableModel",
        "DurableRunner",
        "DurableStreamedRun",
        "run_id_of",
    ]
    assert module.__all__ == dunder_all_order(module.__all__)


async def test_a_run_state_as_input_is_refused_naming_the_run(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log", approve_refund=True)
    paused = await runner.run(agent, PROMPT, run_id="state-1")
    with pytest.raises(zincir.InvalidInput) as raised:
        await runner.run(agent, paused.to_state(), run_id="state-1")  # type: ignore[arg-type]
    assert raised.value.run_id == "state-1"
    assert "original input" in str(raised.value)


@pytest.mark.crash
async def test_a_killed_run_is_resumed_by_a_worker_from_the_run_alone(
    store_target: str, server: ChatServer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    server.script(*script())
    argv = [sys.executable, str(WORKER), store_target, server.base_url, str(log), "worked-1"]
    killed = await asyncio.to_thread(
        subprocess.run, [*argv, "lookup"], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(server.received) == 2
    async with zincir.open_store(store_target) as store:
        runner = DurableRunner(store)
        agent = support(server.client(), log)
        worker = zincir.ResumeWorker(store, names=["triage"])
        worker.poll_interval(0.05)

        async def finished() -> None:
            while (run := await store.get_run("worked-1")) is None or run["status"] != "completed":
                await asyncio.sleep(0.05)

        await asyncio.wait_for(worker.run(runner.resume_handler(agent), finished()), 30)
        replayed = await runner.run(agent, PROMPT, run_id="worked-1")
    assert replayed.final_output == ANSWER
    assert len(server.received) == 4
    assert lines(log) == [
        "tool lookup A-17",
        "tool lookup A-17",  # cut short by the kill
        "tool refund A-17 started",
        "tool refund A-17 done",
    ]


async def test_the_sdks_retry_of_a_failed_model_call_is_that_calls_next_attempt(
    store: zincir.Store, server: ChatServer
) -> None:
    from agents import ModelSettings
    from agents.retry import ModelRetryBackoffSettings, ModelRetrySettings, retry_policies

    from tests.agent.openai_server import error

    retry = ModelRetrySettings(
        max_retries=2,
        backoff=ModelRetryBackoffSettings(initial_delay=0.01, max_delay=0.01, jitter=False),
        policy=retry_policies.http_status([503]),
    )
    agent = Agent(
        name="retried", model=model(server.client()), model_settings=ModelSettings(retry=retry)
    )
    server.script(error(503, "overloaded"), Reply(body=completion("fine")))
    runner = DurableRunner(store)
    result = await runner.run(agent, "How are you?", run_id="retried-1")
    assert result.final_output == "fine"
    assert len(server.received) == 2
    assert await operations(store, "retried-1") == [
        ("openai_agents.model.request", 0),  # its failed attempt is recorded as failed
        ("openai_agents.model.request", 10**12),  # the retry: attempt 1 of call 0
    ]
    replayed = await runner.run(agent, "How are you?", run_id="retried-1")
    assert replayed.final_output == "fine" and len(server.received) == 2


async def test_a_tool_that_raises_leaves_the_run_resumable_and_runs_again(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    from agents import UserError, function_tool

    failures = ["the ledger service is down"]

    @function_tool(failure_error_function=None)  # its errors end the SDK's run
    def ledger(order: str) -> str:
        """Post to the ledger."""
        if failures:
            raise ConnectionError(failures.pop())
        return "posted"

    agent = Agent(name="poster", model=model(server.client()), tools=[ledger])
    call = Reply(body=completion(None, [tool_call("p-1", "ledger", '{"order":"A-17"}')]))
    server.script(call, Reply(body=completion("Posted.")))
    runner = DurableRunner(store)
    with pytest.raises(UserError):
        await runner.run(agent, "Post A-17.", run_id="raises-1")
    run = await store.get_run("raises-1")
    assert run is not None and run["status"] == "running"
    result = await runner.run(agent, "Post A-17.", run_id="raises-1")
    assert result.final_output == "Posted."
    assert len(server.received) == 2  # the tool's call was not asked for again
    assert await operations(store, "raises-1") == [
        ("openai_agents.model.request", 0),
        ("openai_agents.tool.call", 0),
        ("openai_agents.tool.call", 10**12),
        ("openai_agents.model.request", 1),
    ]


async def test_a_budget_stops_the_next_model_call_and_raising_it_resumes_the_run(
    store: zincir.Store, server: ChatServer, tmp_path: Path
) -> None:
    server.script(*script())
    runner = DurableRunner(store)
    agent = support(server.client(), tmp_path / "calls.log")
    budget = zincir.Budget(model_requests=2)
    with pytest.raises(zincir.BudgetExceeded) as raised:
        await runner.run(agent, PROMPT, run_id="budget-1", budget=budget)
    assert raised.value.run_id == "budget-1"
    assert len(server.received) == 2  # the third call was not made
    await zincir.set_budget(store, "budget-1", zincir.Budget(model_requests=10))
    result = await runner.run(agent, PROMPT, run_id="budget-1")
    assert result.final_output == ANSWER
    assert len(server.received) == 4
