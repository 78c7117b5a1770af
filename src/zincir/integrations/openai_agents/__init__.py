"""OpenAI Agents SDK agents on zincir (``pip install "zincir[openai-agents]"``).

Change ``agents.Runner.run`` to a ``DurableRunner``'s ``run`` and each run is a zincir run:
every model call, function-tool call and MCP tool call is recorded once, so the same call
after a crash replays what finished and calls nothing twice::

    runner = DurableRunner("agents.db")
    result = await runner.run(triage, "Refund order A-17", run_id="support-0192")

Tool calls that need approval become zincir approvals (``zincir approvals``); once decided,
``run`` again with the same id and input continues the run.
"""

from __future__ import annotations

try:
    import agents  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.integrations.openai_agents needs openai-agents: pip install "zincir[openai-agents]"'
    ) from error

from ._agents import MCP_REQUEST, TOOL_CALL
from ._approvals import APPROVAL_RESUME
from ._model import MODEL_REQUEST, MODEL_STREAM, DurableModel
from ._runner import DurableRunner, DurableStreamedRun, run_id_of

__all__ = [
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
