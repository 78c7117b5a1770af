"""Durable MCP on the official ``mcp`` SDK (extra ``mcp``).

Every MCP request a run makes is an ``mcp_request`` operation: ``DurableMCPClient`` sends it
under a stable identity (``DurableRequest``, or claimed from a ``DurableRequestSequence``)
and a replay returns its record without connecting; ``serve_mcp`` is the worker that opens
the real session (``stdio`` or ``streamable_http``, with the worker's credentials).
``run_task`` (and ``create_task``, ``get_task``, ``task_result``, ``cancel_task``) drives
MCP tasks; a server's input requests are answered by ``serve_mcp``'s callbacks.
``listen_durable`` delivers each notification a request received through its own
``event_delivery`` operation, once; ``MCPToolset`` gives an agent the server's tools.
"""

try:
    import mcp  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError('zincir.mcp needs the MCP SDK: pip install "zincir[mcp]"') from error

from .._errors import McpInputRoundsExceeded
from ._client import DEFAULT_MAX_PAGES, DEFAULT_MAX_POLLS, DurableMCPClient
from ._connect import Connect, Target, stdio, streamable_http
from ._identity import (
    CLIENT_STEP,
    EVENT_STRIDE,
    MAX_EVENTS,
    DurableRequest,
    DurableRequestSequence,
)
from ._reply import McpReply
from ._toolset import MCPTool, MCPToolset, tool_content
from ._worker import DEFAULT_TIMEOUT, LISTEN_META, TASK_META, TASKS_EXTENSION, serve_mcp

__all__ = [
    "CLIENT_STEP",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_MAX_POLLS",
    "DEFAULT_TIMEOUT",
    "EVENT_STRIDE",
    "LISTEN_META",
    "MAX_EVENTS",
    "TASKS_EXTENSION",
    "TASK_META",
    "Connect",
    "DurableMCPClient",
    "DurableRequest",
    "DurableRequestSequence",
    "MCPTool",
    "MCPToolset",
    "McpInputRoundsExceeded",
    "McpReply",
    "Target",
    "serve_mcp",
    "stdio",
    "streamable_http",
    "tool_content",
]
