"""PostgresStore: the shared store, one mixin of operations per table family."""

from __future__ import annotations

from .._agent import AgentOps
from .._approvals import ApprovalOps
from .._claims import ClaimOps
from .._content_ops import ContentOps
from .._langgraph import LangGraphOps
from .._lifecycle import LifecycleOps
from .._operations import OperationOps
from .._restart import RestartOps
from .._runs import RunOps
from ._tx import PostgresRules
from ._workflow import WorkflowOps

__all__ = ["PostgresStore"]


class PostgresStore(
    RunOps,
    LifecycleOps,
    AgentOps,
    ClaimOps,
    WorkflowOps,
    OperationOps,
    RestartOps,
    ApprovalOps,
    LangGraphOps,
    ContentOps,
    PostgresRules,
):
    """An opened, migrated PostgreSQL schema implementing every operation of ``Store``."""

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
