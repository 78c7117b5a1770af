"""zincir: durable, resumable execution for long-horizon AI agents."""

from ._errors import *  # noqa: F403
from ._errors import __all__ as _error_names
from .runs import (
    AgentContext,
    Checkpoint,
    CheckpointCandidate,
    CheckpointOutcome,
    DurableState,
    PendingCheckpoint,
    ToolCall,
    Verification,
)
from .store import Event, SQLiteStore, open_store

__version__ = "0.1.0"

__all__ = sorted(
    [
        *_error_names,
        "AgentContext",
        "Checkpoint",
        "CheckpointCandidate",
        "CheckpointOutcome",
        "DurableState",
        "Event",
        "PendingCheckpoint",
        "SQLiteStore",
        "ToolCall",
        "Verification",
        "open_store",
    ]
)
