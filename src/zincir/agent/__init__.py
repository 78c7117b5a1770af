"""The durable agent loop: model → tool calls → model … → final text.

Without ``durable=`` the loop calls the model and the tools directly. With a
``DurableBinding`` every model request and tool call is an ``Invocation`` executed by the
binding's runtime, under stable identities, so a restarted process gets the stored records
back; ``serve`` registers the worker-side handlers.

``Runner`` is the one-object way to run them: it builds the handlers, registry and runtime,
gives each run an id and resumes any unfinished run of its agents from the run alone.

A call that needs a decision pauses the run (``result.paused``, a ``PausedRun``);
``agent.resume`` applies ``Approve`` / ``Deny`` / ``ExternalResult``. A retryable model
failure waits a deterministic full-jitter ``retry.delay``; ``run_stream`` yields stream
parts and tool results; ``deliver_event`` sends an application event once.
"""

from .._errors import RetryTool
from ._agent import Agent, AgentStream, EventSink
from ._approval import (
    APPROVAL_TOPIC,
    Approve,
    Decision,
    Deny,
    ExternalResult,
    PausedCall,
    PausedRun,
    args_sha256,
    current_approval,
)
from ._binding import DurableBinding, Handlers
from ._current import ToolCallInfo, current_tool_call
from ._errors import (
    DurableOperationFailed,
    RunNotResumable,
    ToolPolicyFailed,
    ToolRetriesExhausted,
)
from ._events import deliver_event
from ._hooks import AgentHooks
from ._models import FunctionModel, Model
from ._openai import OpenAIChatModel, ProviderError
from ._pending import PendingApproval, decide, pending_approvals
from ._policies import ToolPolicy
from ._result import AgentRunResult
from ._retry import DEFAULT_MODEL_RETRY, DEFAULT_TOOL_RETRY
from ._runner import Runner
from ._serve import Approver, serve
from ._stream import StreamEvent
from ._tools import Tool, ToolErrors, ToolOrigin, Toolset, tool

__all__ = [
    "APPROVAL_TOPIC",
    "DEFAULT_MODEL_RETRY",
    "DEFAULT_TOOL_RETRY",
    "Agent",
    "AgentHooks",
    "AgentRunResult",
    "AgentStream",
    "Approve",
    "Approver",
    "Decision",
    "Deny",
    "DurableBinding",
    "DurableOperationFailed",
    "EventSink",
    "ExternalResult",
    "FunctionModel",
    "Handlers",
    "Model",
    "OpenAIChatModel",
    "PausedCall",
    "PausedRun",
    "PendingApproval",
    "ProviderError",
    "RetryTool",
    "RunNotResumable",
    "Runner",
    "StreamEvent",
    "Tool",
    "ToolCallInfo",
    "ToolErrors",
    "ToolOrigin",
    "ToolPolicy",
    "ToolPolicyFailed",
    "ToolRetriesExhausted",
    "Toolset",
    "args_sha256",
    "current_approval",
    "current_tool_call",
    "decide",
    "deliver_event",
    "pending_approvals",
    "serve",
    "tool",
]
