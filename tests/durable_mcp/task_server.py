"""A real MCP server (official SDK, low-level ``Server``) that asks for input and runs tasks.

    python -m tests.durable_mcp.task_server          # stdio
    python -m tests.durable_mcp.task_server --http   # streamable HTTP on a loopback port

Every step appends a line to ``$ZINCIR_MCP_LEDGER`` (fsynced), so a test counts what really
reached the server. Tools:

- ``interview(topic)``: asks for input twice in one call (2026-07-28 input rounds): first an
  elicitation (a name), then sampling (a line about the topic) and the client's roots;
  returns ``"<name>: <line> [<roots>]"``;
- ``pester()``: asks for an elicitation on every round, forever;
- ``long(seconds)``: as a task (``_meta["io.modelcontextprotocol/task"]``), runs ``seconds``
  and then completes; ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list``
  are served as extension methods.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any, Literal

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from tests.durable_mcp.server import _ledger, _object, _text

TASK_META = "io.modelcontextprotocol/task"
TOOLS = [
    types.Tool(
        name="interview", description="Ask twice.", input_schema=_object({"topic": "string"})
    ),
    types.Tool(name="pester", description="Ask forever.", input_schema=_object({})),
    types.Tool(name="long", description="A task.", input_schema=_object({"seconds": "number"})),
]
TASKS: dict[str, dict[str, Any]] = {}
"""task id -> {"ends": monotonic time, "seconds", "status", "created"} (this process's)."""


class TaskCreated(types.Result):
    result_type: Literal["task"] = "task"
    task: types.Task


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def _elicit() -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="Who is asking?",
            requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
        )
    )


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
    arguments = params.arguments or {}
    responses = params.input_responses or {}
    state = params.request_state
    if params.name == "interview":
        if state is None:
            _ledger(f"ask elicitation {arguments['topic']}")
            return types.InputRequiredResult(input_requests={"who": _elicit()}, request_state="1")
        if state == "1":
            who = responses["who"]
            assert isinstance(who, types.ElicitResult) and who.content is not None
            name = str(who.content["name"])
            _ledger(f"elicited {name}")
            sample = types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[
                        types.SamplingMessage(
                            role="user",
                            content=types.TextContent(text=f"a line about {arguments['topic']}"),
                        )
                    ],
                    max_tokens=40,
                )
            )
            return types.InputRequiredResult(
                input_requests={"line": sample, "roots": types.ListRootsRequest()},
                request_state=f"2:{name}",
            )
        name = state.split(":", 1)[1]
        line = responses["line"]
        roots = responses["roots"]
        assert isinstance(line, types.CreateMessageResult)
        assert isinstance(line.content, types.TextContent)
        assert isinstance(roots, types.ListRootsResult)
        where = ",".join(str(root.uri) for root in roots.roots)
        _ledger(f"sampled {line.content.text} roots {where}")
        return types.CallToolResult(content=_text(f"{name}: {line.content.text} [{where}]"))
    if params.name == "pester":
        _ledger(f"pester {state}")
        return types.InputRequiredResult(
            input_requests={"who": _elicit()}, request_state=str(int(state or 0) + 1)
        )
    if params.name == "long":
        task: Any = (params.meta or {}).get(TASK_META)
        if task is None:
            return types.CallToolResult(content=_text("long runs as a task only"), is_error=True)
        task_id = f"task-{len(TASKS) + 1}"
        seconds = float(arguments["seconds"])
        now = datetime.now(UTC).isoformat()
        TASKS[task_id] = {
            "ends": time.monotonic() + seconds,
            "seconds": seconds,
            "status": "working",
            "created": now,
            # arguments["forever"]: kept without limit, a null ttl (left out on the wire)
            "ttl": None if arguments.get("forever") else int(task.get("ttl") or 600_000),
        }
        _ledger(f"task-created {task_id} {seconds:g}")
        return TaskCreated(task=_task(task_id))
    return types.CallToolResult(content=_text(f"unknown tool {params.name}"), is_error=True)


def _task(task_id: str) -> types.Task:
    entry = TASKS[task_id]
    if entry["status"] == "working" and time.monotonic() >= entry["ends"]:
        entry["status"] = "completed"
    return types.Task(
        task_id=task_id,
        status=entry["status"],
        created_at=entry["created"],
        last_updated_at=datetime.now(UTC).isoformat(),
        ttl=entry["ttl"],
        poll_interval=50,
    )


async def get_task(ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams) -> Any:
    task = _task(params.task_id)
    _ledger(f"task-get {params.task_id} {task.status}")
    return types.GetTaskResult(**task.model_dump())


async def task_result(
    ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
) -> Any:
    task = _task(params.task_id)
    _ledger(f"task-result {params.task_id} {task.status}")
    seconds = TASKS[params.task_id]["seconds"]
    return types.CallToolResult(content=_text(f"{params.task_id} ran {seconds:g} s"))


async def cancel_task(ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams) -> Any:
    entry = TASKS[params.task_id]
    if entry["status"] == "working":
        entry["status"] = "cancelled"
    _ledger(f"task-cancel {params.task_id}")
    return types.CancelTaskResult(**_task(params.task_id).model_dump())


async def list_tasks(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> Any:
    return types.ListTasksResult(tasks=[_task(task_id) for task_id in TASKS])


SERVER: Server[Any] = Server(
    "zincir-input-test", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool
)
SERVER.add_request_handler("tasks/get", types.GetTaskRequestParams, get_task)
SERVER.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, task_result)
SERVER.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel_task)
SERVER.add_request_handler("tasks/list", types.PaginatedRequestParams, list_tasks)


async def serve_stdio() -> None:
    async with stdio_server() as (read, write):
        await SERVER.run(read, write, SERVER.create_initialization_options())


def serve_http() -> None:
    """Bind a free loopback port, say which, and serve until killed."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    app = SERVER.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http()
    else:
        asyncio.run(serve_stdio())
