"""SQLiteStore: the embedded store, one mixin of operations per table family."""

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
from ._tx import SqliteRules
from ._workflow import WorkflowOps

__all__ = ["SQLiteStore"]


class SQLiteStore(
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
    SqliteRules,
):
    """An opened, migrated SQLite database implementing every operation of ``Store``."""

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
