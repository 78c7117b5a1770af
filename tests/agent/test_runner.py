"""``zincir.agent.Runner``: one object runs durable agents, and resumes them from the run alone."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import lines
from tests.agent.runner_agents import HANG_ENV, KEYS_ENV, LOG_ENV, agent, refunds
from tests.helpers import kill_at_line, select
from zincir.agent import (
    Approve,
    DurableBinding,
    Runner,
    RunNotResumable,
    decide,
    pending_approvals,
)
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart
from zincir.store import Store

WORKER = Path(__file__).with_name("runner_worker.py")
PROMPT = "Weather for Oslo, please."


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file each model request and tool run of the runner agents is logged to."""
    path = tmp_path / "calls.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    monkeypatch.delenv(HANG_ENV, raising=False)
    yield path


def config_of(target: str, run_id: str) -> dict[str, object]:
    [(config,)] = select(target, "SELECT config FROM agent_runs WHERE id = ?", (run_id,))
    loaded: dict[str, object] = json.loads(config)
    return loaded


async def test_runs_get_new_ids_and_store_their_agent_and_prompt(
    store: Store, store_url: str, log: Path
) -> None:
    runner = Runner(store, [agent, refunds])
    one = await runner.run(agent, PROMPT)
    two = await runner.run("weather", PROMPT)
    assert one.run_id and two.run_id and one.run_id != two.run_id
    assert one.output == f"{PROMPT} -> Oslo clear" == two.output
    assert config_of(store_url, one.run_id) == {
        "agent": "weather",
        "prompt": PROMPT,
        "stream": False,
    }
    assert select(store_url, "SELECT status FROM agent_runs WHERE id = ?", (one.run_id,)) == [
        ("completed",)
    ]


async def test_the_same_id_and_prompt_returns_the_stored_result_without_calling_anything(
    store: Store, log: Path
) -> None:
    runner = Runner(store, [agent])
    first = await runner.run(agent, PROMPT, run_id="oslo")
    calls = len(lines(log))
    again = await Runner(store, [agent]).run(agent, PROMPT, run_id="oslo")
    assert again.output == first.output and again.run_id == "oslo"
    assert len(lines(log)) == calls
    assert (await runner.resume("oslo")).output == first.output


async def test_a_different_prompt_on_a_finished_run_is_input_drift(store: Store, log: Path) -> None:
    runner = Runner(store, [agent])
    await runner.run(agent, PROMPT, run_id="oslo")
    calls = len(lines(log))
    with pytest.raises(zincir.InputDrift) as raised:
        await runner.run(agent, "Weather for Bergen.", run_id="oslo")
    message = str(raised.value)
    assert raised.value.run_id == "oslo" and "oslo" in message
    assert "started with a different prompt" in message
    assert PROMPT in message and "Weather for Bergen." in message
    assert "new run id" in message and "resume" in message
    assert len(lines(log)) == calls


async def test_a_different_prompt_on_an_unfinished_run_is_input_drift(
    store: Store, store_url: str, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(store, [agent])
    await leave_unfinished(runner, monkeypatch, "unfinished")
    with pytest.raises(zincir.InputDrift, match="different prompt"):
        await runner.run(agent, "Weather for Bergen.", run_id="unfinished")
    # the same check guards agent.run on a DurableBinding of its own
    binding = DurableBinding(runner.runtime, "unfinished", Runner.handlers_for(agent))
    with pytest.raises(zincir.InputDrift, match="different prompt"):
        await agent.run("Weather for Bergen.", durable=binding)
    assert select(store_url, "SELECT status FROM agent_runs") == [("running",)]


async def leave_unfinished(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, run_id: str, prompt: str = PROMPT
) -> None:
    """Start ``run_id`` and stop its loop inside the tool (its lease released): the run
    stays ``running`` with model request 0 recorded."""
    monkeypatch.setenv(HANG_ENV, "1")
    task = asyncio.ensure_future(runner.run(agent, prompt, run_id=run_id))
    log = Path(os.environ[LOG_ENV])
    deadline = time.monotonic() + 10
    while "tool lookup Oslo" not in lines(log):
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.delenv(HANG_ENV)


async def test_resume_reads_the_agent_and_prompt_from_the_run(
    store: Store, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = "A prompt only the run knows."
    await leave_unfinished(Runner(store, [agent]), monkeypatch, "left", prompt)
    result = await Runner(store, [refunds, agent]).resume("left")
    assert result.output == f"{prompt} -> Oslo clear" and result.run_id == "left"
    assert lines(log).count("model 0") == 1  # the recorded request is not asked again


async def test_resume_errors_name_the_run_and_what_to_do(
    store: Store, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(zincir.RunNotFound, match="no run 'nope'"):
        await Runner(store, [agent]).resume("nope")
    await leave_unfinished(Runner(store, [agent]), monkeypatch, "theirs")
    with pytest.raises(RunNotResumable, match="agent 'weather'.*serves \\['refunds'\\]"):
        await Runner(store, [refunds]).resume("theirs")
    ctx = await zincir.AgentContext.create(store, "weather", run_id="old")
    await ctx.close()  # a run stored as agent runs were before they kept their prompt
    with pytest.raises(RunNotResumable, match="without its prompt") as raised:
        await Runner(store, [agent]).resume("old")
    assert raised.value.run_id == "old"
    # a run stored without a prompt is not checked for drift
    assert (await Runner(store, [agent]).run(agent, PROMPT, run_id="old")).output


async def test_a_paused_run_is_approved_through_the_runner(store: Store, log: Path) -> None:
    runner = Runner(store, [refunds])
    paused = await runner.run(refunds, "Refund A-17.", run_id="refund")
    assert paused.paused is not None and paused.run_id == "refund"
    assert [call.call_id for call in paused.paused.calls] == ["call-refund"]
    assert (await runner.resume("refund")).paused is not None  # nothing decided yet
    done = await runner.resume("refund", {"call-refund": Approve()})
    assert done.paused is None and "refunded A-17" in done.output
    assert lines(log).count("tool refund A-17") == 1
    assert (await runner.resume("refund", {"call-refund": Approve()})).output == done.output


async def test_serve_finishes_a_run_once_a_person_decides(store: Store, log: Path) -> None:
    runner = Runner(store, [refunds])
    assert (await runner.run(refunds, "Refund A-17.", run_id="decided")).paused is not None
    stop = asyncio.Event()
    serving = asyncio.ensure_future(runner.serve(stop.wait(), poll_interval=0.02))
    await asyncio.sleep(0.3)
    assert lines(log) == ["model 0"]  # parked: the worker does not spin on it
    [approval] = await pending_approvals(store, "decided")
    await decide(store, approval.approval_id, Approve())
    await wait_for_status(store, "decided", "completed")
    stop.set()
    await asyncio.wait_for(serving, 10)
    assert lines(log) == ["model 0", "tool refund A-17", "model 1"]


async def wait_for_status(store: Store, run_id: str, status: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        row = await store.get_run(run_id)
        if row is not None and row["status"] == status:
            return
        assert time.monotonic() < deadline, row
        await asyncio.sleep(0.02)


async def test_the_natural_resume_worker_handler_completes_the_run(
    store: Store, store_url: str, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(store, [agent])
    await leave_unfinished(runner, monkeypatch, "natural")
    handlers = Runner.handlers_for(agent)

    async def handler(ctx: zincir.AgentContext) -> None:
        binding = DurableBinding(runner.runtime, ctx.run_id, handlers, store=store)
        await agent.run(PROMPT, durable=binding)

    worker = zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=5)).max_attempts(1)
    assert await worker.run_once(handler) == 1
    assert select(store_url, "SELECT status, last_error FROM agent_runs") == [("completed", None)]
    assert lines(log).count("model 0") == 1 and lines(log).count("model 1") == 1


async def test_a_loop_already_running_on_a_held_lease_is_not_joined(
    store: Store, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(store, [agent])
    monkeypatch.setenv(HANG_ENV, "1")
    running = asyncio.ensure_future(runner.run(agent, PROMPT, run_id="busy"))
    deadline = time.monotonic() + 10
    while "tool lookup Oslo" not in lines(log):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    with pytest.raises(zincir.LeaseHeld):
        await runner.run(agent, PROMPT, run_id="busy")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_run_stream_through_the_runner(store: Store, store_url: str, log: Path) -> None:
    runner = Runner(store, [agent])
    stream = runner.run_stream(agent, PROMPT, run_id="streamed")
    events = [event async for event in stream]
    assert events and stream.result.run_id == "streamed"
    assert config_of(store_url, "streamed")["stream"] is True
    assert (await runner.run(agent, PROMPT, run_id="streamed")).output == stream.result.output


async def test_a_versioned_run_through_the_runner(store: Store, store_url: str, log: Path) -> None:
    runner = Runner(store, [agent])
    result = await runner.run(agent, PROMPT, app_version="v2")
    assert result.run_id is not None
    assert select(store_url, "SELECT app_version FROM agent_runs") == [("v2",)]


async def test_runner_arguments_are_checked(store: Store) -> None:
    with pytest.raises(zincir.InvalidInput, match="unique names"):
        Runner(store, [agent, agent])
    with pytest.raises(zincir.InvalidInput, match="at least one agent"):
        Runner(store, [])
    with pytest.raises(zincir.InvalidInput, match="no agent named 'nobody'"):
        await Runner(store, [agent]).run("nobody", PROMPT)
    with pytest.raises(zincir.InvalidInput, match="not one this runner serves"):
        await Runner(store, [agent]).run(refunds, PROMPT)


async def test_a_runner_opens_a_database_path(tmp_path: Path, log: Path) -> None:
    async with Runner(tmp_path / "x.db", [agent]) as runner:
        assert (await runner.run(agent, PROMPT)).output.endswith("Oslo clear")


# -- a runner process killed with SIGKILL inside a tool ---------------------------------


def start_killed_run(target: str, log: Path, run_id: str, prompt: str = PROMPT) -> None:
    """Run the weather agent through a Runner in a child process (lease 60 s) and SIGKILL
    it inside the tool."""
    env = {LOG_ENV: str(log), HANG_ENV: "1"}
    assert kill_at_line(WORKER, [target, run_id, prompt], env) == "inside\n"
    assert lines(log) == ["model 0", "tool lookup Oslo"]


@pytest.mark.crash
@pytest.mark.parametrize("how", ["resume", "run"])
async def test_a_killed_run_restarts_at_once(
    store_target: str, log: Path, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.log"
    monkeypatch.setenv(KEYS_ENV, str(keys))
    start_killed_run(store_target, log, "killed")
    began = time.monotonic()
    async with Runner(store_target, [agent], lease_ttl=timedelta(seconds=60)) as runner:
        if how == "resume":
            result = await runner.resume("killed")
        else:
            result = await runner.run(agent, PROMPT, run_id="killed")
    took = time.monotonic() - began
    assert result.output == f"{PROMPT} -> Oslo clear"
    assert took < 30, f"the restart waited {took:.1f} s: the dead owner's lease (60 s)"
    # the finished model request is not made again; the tool in flight runs again
    assert lines(log) == ["model 0", "tool lookup Oslo", "tool lookup Oslo", "model 1"]
    # the call cut off by the kill runs again under the same idempotency key
    first, again = lines(keys)
    assert first == again
    assert first.startswith("killed call-lookup killed/tool.call/")


async def test_a_direct_tool_call_knows_its_call(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.log"
    monkeypatch.setenv(KEYS_ENV, str(keys))
    assert zincir.agent.current_tool_call() is None
    await agent.run(PROMPT)
    assert lines(keys) == ["None call-lookup call-lookup"]


@pytest.mark.crash
async def test_serve_resumes_a_killed_run(store_target: str, log: Path) -> None:
    prompt = "A prompt the server never saw."
    start_killed_run(store_target, log, "served", prompt)
    async with Runner(store_target, [agent], lease_ttl=timedelta(seconds=60)) as runner:
        stop = asyncio.Event()
        serving = asyncio.ensure_future(runner.serve(stop.wait(), poll_interval=0.05))
        try:
            await wait_for_status(runner.store, "served", "completed", timeout=30)
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
        stored = await runner.resume("served")
    assert stored.output == f"{prompt} -> Oslo clear"
    assert lines(log).count("model 0") == 1 and lines(log).count("model 1") == 1


async def test_a_budget_pauses_a_run_and_a_larger_one_resumes_it(store: Store, log: Path) -> None:
    runner = Runner(store, [agent])
    with pytest.raises(zincir.BudgetExceeded):
        await runner.run(agent, PROMPT, run_id="budgeted", budget=zincir.Budget(model_requests=1))
    assert lines(log).count("model 1") == 0
    result = await runner.resume("budgeted", budget=zincir.Budget(model_requests=5))
    assert result.output == f"{PROMPT} -> Oslo clear"
    assert lines(log).count("model 0") == 1


async def test_serve_arguments_are_checked(store: Store) -> None:
    stop = asyncio.Event()
    with pytest.raises(zincir.InvalidInput, match="max_concurrency"):
        await Runner(store, [agent]).serve(stop.wait(), max_concurrency=0)


async def test_resume_continues_a_streamed_run_streamed(
    store: Store, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(store, [agent])
    monkeypatch.setenv(HANG_ENV, "1")

    async def consume() -> None:
        async for _ in runner.run_stream(agent, PROMPT, run_id="streamed-left"):
            pass

    task = asyncio.ensure_future(consume())
    deadline = time.monotonic() + 10
    while "tool lookup Oslo" not in lines(log):
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.delenv(HANG_ENV)
    result = await Runner(store, [agent]).resume("streamed-left")
    assert result.output == f"{PROMPT} -> Oslo clear"
    assert lines(log).count("model 0") == 1


async def test_a_conversation_past_one_mib_runs_on_a_runner(store: Store) -> None:
    """A long conversation is one model request's input: the runner allows it past the 1 MiB
    default of a bare invocation (the content is stored once)."""
    page = "x" * 300_000

    @zincir.agent.tool
    async def read_page(number: int) -> str:
        """Read one page of the document."""
        return f"page {number}: {page}"

    def model(request: ModelRequest) -> ModelResponse:
        done = sum(message.role == "tool" for message in request.messages)
        if done < 5:
            call = ToolCallPart(
                tool_call_id=f"c{done}", tool_name="read_page", arguments={"number": done}
            )
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(text=f"read {done} pages")])

    reader = zincir.agent.Agent(zincir.agent.FunctionModel(model), name="reader", tools=[read_page])
    result = await Runner(store, [reader]).run(reader, "Read the document.")
    assert result.output == "read 5 pages"
    assert len(json.dumps([m.model_dump(mode="json") for m in result.messages])) > 1_500_000
