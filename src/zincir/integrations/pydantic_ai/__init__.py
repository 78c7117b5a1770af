"""pydantic-ai agents on zincir (``pip install "zincir[pydantic-ai]"``).

Attach ``ZincirDurability`` and run with a run id; every model request, tool call, MCP request
and event delivery is a zincir operation, so the same call after a crash resumes the run::

    agent = Agent(model, name="support", tools=[lookup],
                  capabilities=[ZincirDurability(store="agent.db")])
    result = await agent.run("Refund order A1", run_id="support-0192")

Waits for external input (``RequestInput``) are answered with ``resolve_event``. The decisions
of a continuation (``deferred_tool_results=``) are persisted by ``approval_resume`` operations:
a restart applies the first one, and an approval run with other arguments raises
ApprovalMismatch. A runtime other than LocalRuntime calls the units through handlers
registered with ``serve``.
"""

from __future__ import annotations

try:
    import pydantic_ai.durable_exec  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.integrations.pydantic_ai needs pydantic-ai: pip install "zincir[pydantic-ai]"'
    ) from error

from ...contract import OperationKind
from ...durable import HandlerRegistry
from ._backend import BODIES, SUSPENDS, is_retryable
from ._capability import DEFAULT_UNIT_RETRY, ZincirDurability
from ._identity import classify, messages_digest, project
from ._waiter import ZincirWaiter, resolve_event

__all__ = [
    "DEFAULT_UNIT_RETRY",
    "SUSPENDS",
    "ZincirDurability",
    "ZincirWaiter",
    "classify",
    "is_retryable",
    "messages_digest",
    "project",
    "resolve_event",
    "serve",
]


def serve(registry: HandlerRegistry, agent_name: str) -> None:
    """Register the agent's unit bridge for every kind, for a runtime that dispatches to
    registered handlers in this process (a LocalRuntime runs the units inline instead)."""
    from ._identity import handler_id

    for kind in OperationKind:
        registry.register(kind, handler_id(agent_name), BODIES)
