"""MCP tasks and input round trips against a real server of the official SDK
(``tests.durable_mcp.task_server``): a call that asks for input twice is one operation,
answered by the worker's callbacks and replayed without asking again; a task is created
once, polled, cancelled, and resumed on the same task id by a process re-run after SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp.client.context import ClientRequestContext
from pydantic import FileUrl

import zincir
from tests.conftest import REPO
from tests.durable_mcp.conftest import (
    HANDLER,
    HANDLERS,
    Counting,
    HttpServer,
    ledger_lines,
    server_env,
)
from zincir.agent import DurableBinding
from zincir.agent._errors import DurableOperationFailed
from zincir.mcp import (
    Connect,
    DurableMCPClient,
    DurableRequest,
    DurableRequestSequence,
    McpInputRoundsExceeded,
    serve_mcp,
    streamable_http,
)
from zincir.store import Store

ASKS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


def start_task_server(ledger: Path) -> HttpServer:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.durable_mcp.task_server", "--http"],
        cwd=REPO,
        env=server_env(ledger),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        process.wait(10)
        raise RuntimeError(f"the MCP task server did not start: {line!r}")
    return HttpServer(process, f"http://127.0.0.1:{int(line.split()[1])}/mcp")


@pytest.fixture
def task_server(ledger: Path) -> Iterator[HttpServer]:
    server = start_task_server(ledger)
    try:
        yield server
    finally:
        server.stop()


class Answers:
    """The worker's input callbacks; each call is counted (a replay must make none)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def elicitation(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.asked.append(f"elicitation {params.message}")
        return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})

    async def sampling(
        self, context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult:
        content = params.messages[0].content
        assert isinstance(content, mcp_types.TextContent)
        self.asked.append(f"sampling {content.text}")
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(text="roses bloom"), model="m"
        )

    async def roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        self.asked.append("roots")
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=FileUrl("file:///work/repo"))])


def bound(
    store: Store,
    connect: Connect,
    answers: Answers | None = None,
    *,
    run_id: str = "mcp-run",
) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve_mcp(
        registry,
        HANDLER,
        connect,
        timeout=20,
        elicitation=None if answers is None else answers.elicitation,
        sampling=None if answers is None else answers.sampling,
        roots=None if answers is None else answers.roots,
    )
    runtime = zincir.LocalRuntime(store, registry, zincir.RetryPolicy.no_retry())
    return DurableBinding(runtime, run_id, HANDLERS)


async def test_a_call_asking_for_input_twice_is_one_operation_and_replays_without_asking(
    store: Store, task_server: HttpServer, ledger: Path
) -> None:
    answers = Answers()
    connect = Counting(streamable_http(task_server.url))
    client = DurableMCPClient(None, bound(store, connect, answers), capabilities=ASKS)
    result = await client.call_tool(
        "interview", {"topic": "spring"}, durable=DurableRequest("ask", 0)
    )
    assert result.content == [mcp_types.TextContent(text="Ada: roses bloom [file:///work/repo]")]
    assert answers.asked == ["elicitation Who is asking?", "sampling a line about spring", "roots"]
    assert ledger_lines(ledger) == [
        "ask elicitation spring",
        "elicited Ada",
        "sampled roses bloom roots file:///work/repo",
    ]
    assert connect.opened == ["tools/call"]  # one session, one operation, three rounds
    again, replaying = Answers(), Counting(streamable_http(task_server.url))
    client = DurableMCPClient(None, bound(store, replaying, again), capabilities=ASKS)
    replayed = await client.call_tool(
        "interview", {"topic": "spring"}, durable=DurableRequest("ask", 0)
    )
    assert replayed == result
    assert again.asked == [] and replaying.opened == []
    assert len(ledger_lines(ledger)) == 3


async def test_input_is_answered_only_when_declared_and_served(
    store: Store, task_server: HttpServer, ledger: Path
) -> None:
    url = task_server.url
    with pytest.raises(zincir.InvalidInput, match=r"\[run mcp-run\].*'elicitation'"):
        DurableMCPClient(None, bound(store, streamable_http(url)), capabilities={"elicitation": 1})
    # Declared, but the worker registered no callback: refused before the server is asked.
    declared = DurableMCPClient(None, bound(store, streamable_http(url)), capabilities=ASKS)
    with pytest.raises(DurableOperationFailed, match="McpInputNotServed.*serve_mcp") as refused:
        await declared.call_tool("interview", {"topic": "x"}, durable=DurableRequest("ask", 1))
    assert refused.value.run_id == "mcp-run"
    assert ledger_lines(ledger) == []
    # Served, but not declared: not advertised, so the callbacks are never called.
    answers = Answers()
    silent = DurableMCPClient(None, bound(store, streamable_http(url), answers))
    with pytest.raises(DurableOperationFailed, match="McpServerError"):
        await silent.call_tool("interview", {"topic": "y"}, durable=DurableRequest("ask", 2))
    assert answers.asked == []
    assert ledger_lines(ledger) == ["ask elicitation y"]


async def test_more_input_rounds_than_the_bound_is_a_typed_recorded_error(
    store: Store, task_server: HttpServer, ledger: Path
) -> None:
    answers = Answers()
    connect = Counting(streamable_http(task_server.url))
    client = DurableMCPClient(
        None, bound(store, connect, answers), capabilities=ASKS, max_round_trips=3
    )
    with pytest.raises(McpInputRoundsExceeded, match=r"\[run mcp-run\].*after 3 round trips") as e:
        await client.call_tool("pester", {}, durable=DurableRequest("pester", 0))
    assert "max_round_trips" in str(e.value) and e.value.run_id == "mcp-run"
    assert ledger_lines(ledger) == ["pester None", "pester 1", "pester 2", "pester 3"]
    assert len(answers.asked) == 3
    with pytest.raises(McpInputRoundsExceeded):  # the failure is the record: no fourth ask
        await client.call_tool("pester", {}, durable=DurableRequest("pester", 0))
    assert len(ledger_lines(ledger)) == 4 and connect.opened == ["tools/call"]
    direct = DurableMCPClient(streamable_http(task_server.url), max_round_trips=0)
    with pytest.raises(McpInputRoundsExceeded, match="after 0 round trips"):
        await direct.call_tool("pester", {})


async def test_a_task_is_created_once_polled_and_replayed_from_its_records(
    store: Store, task_server: HttpServer, ledger: Path
) -> None:
    connect = Counting(streamable_http(task_server.url))
    client = DurableMCPClient(None, bound(store, connect))
    result = await client.run_task(
        "long", {"seconds": 1.2}, durable=DurableRequest("job", 0), poll_interval=0.05
    )
    assert result.content == [mcp_types.TextContent(text="task-1 ran 1.2 s")]
    lines = ledger_lines(ledger)
    assert lines[0] == "task-created task-1 1.2" and lines[-1] == "task-result task-1 completed"
    polls = [line for line in lines if line.startswith("task-get")]
    assert polls[-1] == "task-get task-1 completed" and len(polls) >= 3
    assert connect.opened == ["tools/call", *["tasks/get"] * len(polls), "tasks/result"]

    replaying = Counting(streamable_http(task_server.url))
    again = DurableMCPClient(None, bound(store, replaying))
    replay = again.run_task(
        "long", {"seconds": 1.2}, durable=DurableRequest("job", 0), poll_interval=60
    )
    # recorded polls replay without waiting poll_interval between them
    assert await asyncio.wait_for(replay, timeout=10) == result
    assert replaying.opened == [] and ledger_lines(ledger) == lines


async def test_a_task_kept_without_limit_reads_as_a_null_ttl(
    store: Store, task_server: HttpServer
) -> None:
    binding = bound(store, streamable_http(task_server.url))
    client = DurableMCPClient(None, binding, durable_requests=DurableRequestSequence(binding))
    task = await client.create_task("long", {"seconds": 0.2, "forever": True})
    assert task.ttl is None
    result = await client.run_task("long", {"seconds": 0.2, "forever": True}, poll_interval=0.05)
    assert result.content == [mcp_types.TextContent(text="task-2 ran 0.2 s")]
    assert [t.ttl for t in await client.list_tasks()] == [None, None]


async def test_a_task_is_cancelled_and_listed(
    store: Store, task_server: HttpServer, ledger: Path
) -> None:
    binding = bound(store, streamable_http(task_server.url))
    client = DurableMCPClient(None, binding, durable_requests=DurableRequestSequence(binding))
    task = await client.create_task("long", {"seconds": 60}, ttl=120_000)
    assert (task.task_id, task.status, task.ttl) == ("task-1", "working", 120_000)
    assert (await client.get_task(task.task_id)).status == "working"
    cancelled = await client.cancel_task(task.task_id)
    assert cancelled.status == "cancelled"
    assert [(t.task_id, t.status) for t in await client.list_tasks()] == [("task-1", "cancelled")]
    assert client.durable_requests is not None and client.durable_requests.claimed == 4
    # A task cancelled (by another branch) while run_task polls it ends run_task typed.
    runner = asyncio.ensure_future(client.run_task("long", {"seconds": 60}, poll_interval=0.05))
    while not any(line.startswith("task-created task-2") for line in ledger_lines(ledger)):
        await asyncio.sleep(0.02)
    other = DurableMCPClient(None, binding)
    await other.cancel_task("task-2", durable=DurableRequest("cancel", 0))
    with pytest.raises(zincir.OperationFailed, match=r"\[run mcp-run\].*was cancelled"):
        await runner
    assert sum(line.startswith("task-created") for line in ledger_lines(ledger)) == 2


def test_a_process_killed_while_polling_resumes_the_same_task(
    store_target: str, task_server: HttpServer, ledger: Path
) -> None:
    command = [sys.executable, "-m", "tests.durable_mcp.task_worker", store_target]
    command += [task_server.url, "2"]
    env = {"PATH": "", "PYTHONPATH": server_env(ledger)["PYTHONPATH"]}
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while sum(line == "task-get task-1 working" for line in ledger_lines(ledger)) < 3:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert first.stdout is not None
    first.stdout.close()
    polled_before = sum(line.startswith("task-get") for line in ledger_lines(ledger))

    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "result: task-1 ran 2 s"
    lines = ledger_lines(ledger)
    assert [line for line in lines if line.startswith("task-created")] == ["task-created task-1 2"]
    polls = [line for line in lines if line.startswith("task-get")]
    assert {line.split()[1] for line in polls} == {"task-1"}
    assert len(polls) > polled_before  # the re-run went on polling the same task id
    assert lines[-1] == "task-result task-1 completed"
