"""A real MCP server for the tests, on the official SDK's low-level ``Server`` API.

    python -m tests.durable_mcp.server          # stdio
    python -m tests.durable_mcp.server --http   # streamable HTTP on a loopback port ("PORT n")

Every ``tools/call`` appends ``call <name> <arguments>`` to ``$ZINCIR_MCP_LEDGER`` (fsynced),
so a test can count how often a call really reached the server. ``tools/list`` pages
``PAGE_SIZE`` tools at a time, so a full listing takes several requests. Tools with a job:

- ``add(a, b)``: structured ``{"sum": a + b}``; ``forecast(city)``: the agent's MCP tool;
- ``echo(text)``: waits ``$ZINCIR_MCP_DELAYS[text]`` seconds first, then logs ``done <text>``;
- ``slow(n)``: sends ``n`` progress notifications, then returns;
- ``hang()`` never returns; ``die()`` kills the server mid-request;
- ``bad_structure()`` returns structured content that breaks its own output schema.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

PAGE_SIZE = 4
FILLERS = 5


def _object(properties: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }


TOOLS = [
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema=_object({"a": "integer", "b": "integer"}),
        output_schema=_object({"sum": "integer"}),
    ),
    types.Tool(
        name="forecast",
        description="The weather forecast for a city.",
        input_schema=_object({"city": "string"}),
    ),
    types.Tool(
        name="bad_structure",
        description="Break its own output schema.",
        input_schema=_object({}),
        output_schema=_object({"n": "integer"}),
    ),
    types.Tool(name="echo", description="Echo a text.", input_schema=_object({"text": "string"})),
    types.Tool(
        name="slow",
        description="Report progress n times.",
        input_schema=_object({"n": "integer"}),
    ),
    types.Tool(name="hang", description="Never answer.", input_schema=_object({})),
    types.Tool(name="die", description="Exit mid-request.", input_schema=_object({})),
    *(
        types.Tool(name=f"filler_{i}", description=f"Filler {i}.", input_schema=_object({}))
        for i in range(FILLERS)
    ),
]
RESOURCES = [
    types.Resource(name="readme", uri="memo://readme", mime_type="text/plain"),
    types.Resource(name="policy", uri="memo://policy", mime_type="text/plain"),
]
TEXTS = {"memo://readme": "Read me first.", "memo://policy": "Refunds within 30 days."}
PROMPTS = [
    types.Prompt(
        name="greet",
        description="Greet someone.",
        arguments=[types.PromptArgument(name="name", required=True)],
    )
]


def _ledger(line: str) -> None:
    path = os.environ.get("ZINCIR_MCP_LEDGER")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def _page(cursor: str | None) -> tuple[int, int]:
    start = int(cursor) if cursor else 0
    return start, start + PAGE_SIZE


def _next(end: int, total: int) -> str | None:
    return str(end) if end < total else None


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    start, end = _page(params.cursor if params else None)
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=_next(end, len(TOOLS)))


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    arguments = params.arguments or {}
    _ledger(f"call {params.name} {json.dumps(arguments, sort_keys=True)}")
    if params.name == "add":
        total = int(arguments["a"]) + int(arguments["b"])
        return types.CallToolResult(content=_text(str(total)), structured_content={"sum": total})
    if params.name == "forecast":
        return types.CallToolResult(content=_text(f"Sunny in {arguments['city']}, 21 C"))
    if params.name == "echo":
        delays_file = os.environ.get("ZINCIR_MCP_DELAYS")
        delays = json.loads(Path(delays_file).read_text("utf-8")) if delays_file else {}
        await asyncio.sleep(float(delays.get(arguments["text"], 0)))
        _ledger(f"done {arguments['text']}")
        return types.CallToolResult(content=_text(str(arguments["text"])))
    if params.name == "slow":
        count = int(arguments["n"])
        for step in range(1, count + 1):
            await ctx.session.report_progress(step, count, f"step {step}")
        return types.CallToolResult(content=_text(f"done after {count} steps"))
    if params.name == "hang":
        await asyncio.sleep(3600)
    if params.name == "die":
        os._exit(3)
    if params.name == "bad_structure":
        return types.CallToolResult(content=_text("x"), structured_content={"n": "not a number"})
    if params.name.startswith("filler_"):
        return types.CallToolResult(content=_text(params.name))
    return types.CallToolResult(content=_text(f"unknown tool {params.name}"), is_error=True)


async def list_resources(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def read_resource(
    ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    _ledger(f"read {uri}")
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=TEXTS[uri])]
    )


async def list_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(
    ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
) -> types.GetPromptResult:
    name = (params.arguments or {}).get("name", "you")
    return types.GetPromptResult(
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=f"Hi {name}"))]
    )


SERVER: Server[Any] = Server(
    "zincir-test",
    version="1.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
)


async def serve_stdio() -> None:
    async with stdio_server() as (read, write):
        await SERVER.run(read, write, SERVER.create_initialization_options())


def serve_http() -> None:
    """Bind a free loopback port, say which, and serve until killed."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    app = SERVER.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http()
    else:
        asyncio.run(serve_stdio())
