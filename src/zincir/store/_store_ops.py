"""Every operation of the ``Store`` protocol, written once: one mixin per table family.

A backend's store is this class over the backend's :class:`~._sql.Rules` (its transactions,
its :class:`~._sql.Tx`), plus the few paths it keeps for speed (PostgreSQL's one-statement
step result).
"""

from __future__ import annotations

from ._agent import AgentOps
from ._approvals import ApprovalOps
from ._children import ChildOps
from ._claims import ClaimOps
from ._content_ops import ContentOps
from ._forks import ForkOps
from ._langgraph import LangGraphOps
from ._lifecycle import LifecycleOps
from ._messages import MessageOps
from ._operations import OperationOps
from ._queues import QueueOps
from ._rate_limits import RateLimitOps
from ._restart import RestartOps
from ._runs import RunOps
from ._schedules import ScheduleOps
from ._steps import StepOps
from ._streams import StreamOps
from ._timers import TimerOps

__all__ = ["StoreOps"]


class StoreOps(
    RunOps,
    LifecycleOps,
    AgentOps,
    ClaimOps,
    TimerOps,
    MessageOps,
    ChildOps,
    StepOps,
    OperationOps,
    RestartOps,
    ApprovalOps,
    LangGraphOps,
    ContentOps,
    StreamOps,
    ForkOps,
    RateLimitOps,
    QueueOps,
    ScheduleOps,
):
    """Runs and leases, the agent log, claims, workflows (steps, timers, messages, child
    runs), operations, restart checkpoints, approvals, LangGraph checkpoints, content and
    runs' durable streams, forks."""
