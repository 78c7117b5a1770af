"""The restart-checkpoint contract: how far application code consumed a run's replay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["RestartCheckpoint", "RestartStore"]


@dataclass(frozen=True, slots=True)
class RestartCheckpoint:
    """A saved checkpoint: its run and id, its revision and its payload (a JSON value)."""

    run_id: str
    checkpoint_id: str
    revision: int
    payload: Any


@runtime_checkable
class RestartStore(Protocol):
    """Load, save and remove restart checkpoints by (run id, checkpoint id).

    Revisions only move forward: saving the stored revision with the stored payload is a
    no-op; an older revision, or the same revision with another payload, raises
    ``RevisionConflict`` and changes nothing.
    """

    async def load(self, run_id: str, checkpoint_id: str) -> RestartCheckpoint | None: ...

    async def save(
        self, run_id: str, checkpoint_id: str, revision: int, payload: Any
    ) -> RestartCheckpoint: ...

    async def remove(self, run_id: str, checkpoint_id: str) -> bool: ...
