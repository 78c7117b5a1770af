"""The durable agent loop: model → tool calls → model … → final text.

Without ``durable=`` the loop calls the model and the tools directly. With a
``DurableBinding`` every model request and tool call is an ``Invocation`` executed by the
binding's runtime, under stable identities, so a restarted process gets the stored records
back; ``serve`` registers the worker-side handlers.
"""

from ._agent import Agent, EventSink
from ._binding import DurableBinding, Handlers
from ._errors import DurableOperationFailed, ToolRetriesExhausted
from ._hooks import AgentHooks
from ._models import FunctionModel, Model
from ._result import AgentRunResult
from ._serve import Approver, serve
from ._tools import Tool, ToolOrigin, Toolset, tool

__all__ = [
    "Agent",
    "AgentHooks",
    "AgentRunResult",
    "Approver",
    "DurableBinding",
    "DurableOperationFailed",
    "EventSink",
    "FunctionModel",
    "Handlers",
    "Model",
    "Tool",
    "ToolOrigin",
    "ToolRetriesExhausted",
    "Toolset",
    "serve",
    "tool",
]
