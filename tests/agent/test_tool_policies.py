"""Tool policies: arguments rewritten before the call's identity, refusals, results rewritten
before they are logged and sent, the same on a replay after SIGKILL, and drift when a policy
changed between runs. The model is the real ``openai`` SDK against the scripted server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.openai_server import API_KEY, ChatServer, Reply, completion, tool_call
from tests.agent.policy_agents import PROMPT, binding, build
from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, read_store
from zincir.agent import Agent, OpenAIChatModel, ToolOrigin, ToolPolicyFailed, tool
from zincir.payloads import ToolCallPart
from zincir.store import OperationKey, Store

WORKER = Path(__file__).with_name("policy_agents.py")
LONG = 5000
NO_RETRY = zincir.RetryPolicy.no_retry()  # a script run out fails the test at once


def script(server: ChatServer, arguments: str = '{"query": "zincir", "limit": 500}') -> None:
    """A search call, then the final text."""
    server.script(
        Reply(completion(None, [tool_call("c1", "search", arguments)], finish_reason="tool_calls")),
        Reply(completion("done")),
    )


def model_of(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-test", server.client())


def tool_message(body: dict[str, Any]) -> dict[str, Any]:
    [message] = [m for m in body["messages"] if m["role"] == "tool"]
    return message


async def stored_call(store: Store, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``tool.call`` operation's stored input (the invocation) and output (the record)."""
    row = await store.get_operation(OperationKey(run_id, "tool.call", 0))
    assert row is not None and row.record is not None
    record = zincir.decode_record(row.record)
    assert isinstance(record.outcome, zincir.Success)
    return json.loads(record.invocation.input_json), json.loads(record.outcome.output_json)


async def tool_results(store: Store, run_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in await store.list_events(run_id) if e.type == "tool_result"]


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


# -- one run ---------------------------------------------------------------------------------


async def test_arguments_and_results_are_rewritten_on_a_durable_run(
    server: ChatServer, durable: Durable, tmp_path: Path
) -> None:
    script(server)
    log = tmp_path / "log"
    agent = build(server.base_url, log, client=server.client())
    result = await agent.run(PROMPT, durable=binding(agent, durable.store, "run-1"))

    assert result.output == "done"
    assert lines(log) == ["search zincir 50"]  # the tool received the clamped arguments
    invocation, output = await stored_call(durable.store, "run-1")
    assert invocation["arguments"] == {"query": "zincir", "limit": 50}  # the identity's input
    assert invocation["call"]["arguments"] == {"query": "zincir", "limit": 500}  # as asked
    # The record keeps the tool's own result; the log and the model get the rewritten one.
    assert len(output["content"]) == len("50 hits for zincir: ") + LONG
    shown = "50 hits for zincir: " + "x" * 20 + f"… [{LONG - 20} more characters]"
    assert await tool_results(durable.store, "run-1") == [
        {"id": "c1", "result": shown, "is_error": False}
    ]
    assert tool_message(server.bodies[1])["content"] == shown


async def test_a_refused_call_never_runs_and_the_model_reads_why(
    server: ChatServer, durable: Durable
) -> None:
    calls: list[str] = []

    def outside(call: ToolCallPart) -> str | None:
        path = call.arguments["path"]
        return None if path.startswith("/tmp/") else f"{path} is outside /tmp; use a path in it"

    @tool(policies=[zincir.ToolPolicy(refuse=outside, name="sandbox")])
    def delete(path: str) -> str:
        calls.append(path)
        return "deleted"

    server.script(
        Reply(
            completion(
                None,
                [tool_call("c1", "delete", '{"path": "/etc/passwd"}')],
                finish_reason="tool_calls",
            )
        ),
        Reply(completion("I may not delete it.")),
    )
    agent = Agent(model_of(server), retry=NO_RETRY, tools=[delete])
    result = await agent.run("Delete /etc/passwd.", durable=durable.binding(agent))

    assert result.output == "I may not delete it."
    assert calls == []
    reason = "/etc/passwd is outside /tmp; use a path in it"
    assert tool_message(server.bodies[1])["content"] == reason
    assert await tool_results(durable.store, "run-1") == [
        {"id": "c1", "result": reason, "is_error": True}
    ]
    assert await durable.store.get_operation(OperationKey("run-1", "tool.call", 0)) is None
    # A replay of the finished run refuses the same way and calls nothing.
    again = await agent.run("Delete /etc/passwd.", durable=durable.binding(agent))
    assert again.output == "I may not delete it." and calls == []


async def test_a_plain_run_honours_policies_in_order(server: ChatServer) -> None:
    """Without ``durable=``: the agent's policies wrap the tool's (arguments: the agent's
    first; results: the tool's first), for an application and a workflow-origin tool."""
    seen: list[tuple[str, Any]] = []

    def tag(who: str) -> zincir.ToolPolicy:
        def arguments(call: ToolCallPart) -> dict[str, Any]:
            return {"text": call.arguments["text"] + f">{who}"}

        def returns(call: ToolCallPart, result: Any) -> Any:
            return f"{result}<{who}"

        return zincir.ToolPolicy(arguments=arguments, returns=returns, name=who)

    @tool(policies=[tag("tool")])
    def echo(text: str) -> str:
        seen.append(("echo", text))
        return text

    @tool(policies=[tag("tool")], origin=ToolOrigin.WORKFLOW)
    def local_echo(text: str) -> str:
        seen.append(("local_echo", text))
        return text

    server.script(
        Reply(
            completion(
                None,
                [
                    tool_call("c1", "echo", '{"text": "a"}'),
                    tool_call("c2", "local_echo", '{"text": "b"}'),
                ],
                finish_reason="tool_calls",
            )
        ),
        Reply(completion("ok")),
    )
    agent = Agent(
        model_of(server),
        retry=NO_RETRY,
        tools=[echo, local_echo],
        tool_policies=[tag("agent")],
    )
    assert (await agent.run("Echo.")).output == "ok"
    assert sorted(seen) == [("echo", "a>agent>tool"), ("local_echo", "b>agent>tool")]
    tools = {
        m["tool_call_id"]: m["content"] for m in server.bodies[1]["messages"] if m["role"] == "tool"
    }
    assert tools == {"c1": "a>agent>tool<tool<agent", "c2": "b>agent>tool<tool<agent"}


async def test_approval_binds_the_rewritten_arguments(server: ChatServer) -> None:
    @tool(requires_approval=True, policies=[build_clamp()])
    def search(query: str, limit: int = 10) -> str:
        return f"{limit} hits"

    script(server)
    agent = Agent(model_of(server), retry=NO_RETRY, tools=[search])
    paused = (await agent.run(PROMPT)).paused
    assert paused is not None
    [call] = paused.calls
    assert call.arguments == {"query": "zincir", "limit": 50}
    assert call.args_sha256 == zincir.agent.args_sha256({"query": "zincir", "limit": 50})


def build_clamp() -> zincir.ToolPolicy:
    from tests.agent.policy_agents import clamp

    return clamp(50)


async def test_a_policy_that_raises_stops_the_run_with_a_typed_error(
    server: ChatServer, durable: Durable, tmp_path: Path
) -> None:
    def broken(call: ToolCallPart) -> dict[str, Any]:
        raise KeyError("limit")

    calls: list[int] = []

    @tool(policies=[zincir.ToolPolicy(arguments=broken, name="broken-clamp")])
    def search(query: str, limit: int = 10) -> str:
        calls.append(limit)
        return "hits"

    server.script(
        Reply(
            completion(
                None,
                [tool_call("c1", "search", '{"query": "zincir", "limit": 500}')],
                finish_reason="tool_calls",
            )
        )
    )
    agent = Agent(model_of(server), retry=NO_RETRY, tools=[search])
    with pytest.raises(ToolPolicyFailed) as caught:
        await agent.run(PROMPT, durable=durable.binding(agent, "broken-1"))
    error = caught.value
    assert (error.run_id, error.tool, error.policy) == ("broken-1", "search", "broken-clamp")
    assert "[run broken-1]" in str(error) and "KeyError" in str(error)
    assert "resume the run" in str(error)
    assert calls == [] and len(server.received) == 1  # the model was not told
    assert await tool_results(durable.store, "broken-1") == []

    # Arguments a policy returns are checked against the tool's schema too.
    def wrong(call: ToolCallPart) -> dict[str, Any]:
        return {"query": 7}

    @tool(policies=[zincir.ToolPolicy(arguments=wrong, name="wrong")])
    def lookup(query: str) -> str:
        return query

    server.script(
        Reply(
            completion(
                None, [tool_call("c1", "lookup", '{"query": "q"}')], finish_reason="tool_calls"
            )
        )
    )
    agent = Agent(model_of(server), retry=NO_RETRY, tools=[lookup])
    with pytest.raises(ToolPolicyFailed, match="fail the tool's schema"):
        await agent.run("Look up q.")


async def test_a_return_policy_that_raises_keeps_the_result_and_resumes_once_fixed(
    server: ChatServer, durable: Durable, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    fixed = build(server.base_url, log, client=server.client())

    def broken(call: ToolCallPart, result: Any) -> Any:
        raise ValueError("no")

    agent = build(server.base_url, log, client=server.client())
    agent.tool_policies = (zincir.ToolPolicy(returns=broken, name="broken-truncate"),)
    script(server)
    with pytest.raises(ToolPolicyFailed, match="tool ran and its result is kept") as caught:
        await agent.run(PROMPT, durable=binding(agent, durable.store, "ret-1"))
    assert (caught.value.run_id, caught.value.policy) == ("ret-1", "broken-truncate")
    assert lines(log) == ["search zincir 50"] and len(server.received) == 1

    result = await fixed.run(PROMPT, durable=binding(fixed, durable.store, "ret-1"))
    assert result.output == "done"
    assert lines(log) == ["search zincir 50"]  # not called again
    assert tool_message(server.bodies[1])["content"].endswith(f"… [{LONG - 20} more characters]")


# -- killed and run again --------------------------------------------------------------------


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_target(request, tmp_path)


def killed_at(point: str, db: str, log: Path, server: ChatServer, *options: str) -> None:
    """Run the policy agent in a child process armed to SIGKILL itself at ``point``."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ZINCIR_CRASH_AT": point}
    done = subprocess.run(
        [sys.executable, str(WORKER), db, str(log), "crash-run", server.base_url, *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


async def rerun(
    db: str, log: Path, server: ChatServer, **policy: int
) -> zincir.agent.AgentRunResult:
    """Run the same run again here once the dead process's lease has lapsed."""
    agent = build(server.base_url, log, client=server.client(), **policy)
    store = zincir.open_store(db)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                return await agent.run(PROMPT, durable=binding(agent, store, "crash-run"))
            except zincir.LeaseHeld:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
    finally:
        await store.close()


@pytest.mark.crash
async def test_killed_after_the_tool_ran_replays_with_the_same_policies(
    server: ChatServer, crash_target: str, tmp_path: Path
) -> None:
    db, log = crash_target, tmp_path / "log"
    script(server)
    killed_at("agent.tools_done", db, log, server)
    assert lines(log) == ["search zincir 50"] and len(server.received) == 1

    result = await rerun(db, log, server)
    assert result.output == "done"
    assert lines(log) == ["search zincir 50"]  # the tool was not called again
    shown = "50 hits for zincir: " + "x" * 20 + f"… [{LONG - 20} more characters]"
    assert tool_message(server.bodies[1])["content"] == shown
    assert await read_store(db, lambda s: tool_results(s, "crash-run")) == [
        {"id": "c1", "result": shown, "is_error": False}
    ]


@pytest.mark.crash
async def test_an_arguments_policy_changed_between_runs_is_drift(
    server: ChatServer, crash_target: str, tmp_path: Path
) -> None:
    db, log = crash_target, tmp_path / "log"
    script(server)
    killed_at("agent.tools_done", db, log, server)
    with pytest.raises(zincir.InputDrift) as caught:
        await rerun(db, log, server, cap=20)
    message = str(caught.value)
    assert caught.value.run_id == "crash-run" and "[run crash-run]" in message
    assert "'search'" in message and "tool policies" in message
    assert "keep the policies as they were" in message
    assert lines(log) == ["search zincir 50"]  # nothing ran with the new arguments
    assert len(server.received) == 1


@pytest.mark.crash
async def test_a_return_policy_changed_after_the_model_read_it_is_drift(
    server: ChatServer, crash_target: str, tmp_path: Path
) -> None:
    """Killed after the second call's rewritten result was logged: a replay whose policy
    would show the model another rewrite than the log holds is caught, not sent. (The first
    result, already in a stored model request, replays from that request as the model read
    it.)"""
    db, log = crash_target, tmp_path / "log"
    server.script(
        Reply(
            completion(
                None,
                [tool_call("c1", "search", '{"query": "zincir", "limit": 5}')],
                finish_reason="tool_calls",
            )
        ),
        Reply(
            completion(
                None,
                [tool_call("c2", "search", '{"query": "more", "limit": 5}')],
                finish_reason="tool_calls",
            )
        ),
        Reply(completion("done")),
    )
    killed_at("agent.tools_done:2", db, log, server)
    assert lines(log) == ["search zincir 5", "search more 5"] and len(server.received) == 2
    with pytest.raises(zincir.InputDrift) as caught:
        await rerun(db, log, server, keep=10)
    message = str(caught.value)
    assert caught.value.run_id == "crash-run" and "tool policies" in message
    assert "'c2' (search) was logged with another result" in message
    assert "keep the policies as they were" in message
    assert len(server.received) == 2 and len(lines(log)) == 2  # nothing asked or called

    result = await rerun(db, log, server)  # with the policies it ran with: it goes on
    assert result.output == "done" and len(lines(log)) == 2


def test_policies_are_checked_when_given() -> None:
    with pytest.raises(zincir.InvalidInput, match="ToolPolicy"):
        Agent(
            OpenAIChatModel("gpt-test", openai.AsyncOpenAI(api_key=API_KEY)),
            tool_policies=[lambda call: call],  # type: ignore[list-item]
        )
    with pytest.raises(zincir.InvalidInput, match="a list of ToolPolicy"):
        tool(policies=zincir.ToolPolicy())(lambda: None)  # type: ignore[arg-type]
