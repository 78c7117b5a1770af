"""The DurableRuntime protocol: the one method every runtime (local, Temporal) implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..contract import Invocation, Record

__all__ = ["DurableRuntime"]


@runtime_checkable
class DurableRuntime(Protocol):
    """Runs an invocation at most once per identity and returns its persisted record.

    Every runtime: (0) raises ``MissingDurableHandler`` and persists nothing when
    no record exists and no handler is registered; (1) deduplicates on the full identity;
    (2) raises ``InputDrift`` for a known key with a different input digest; (3) dispatches
    by ``handler_id``; (4) persists the terminal record before returning it; (5) returns the
    persisted record on replay without calling the handler.
    """

    async def execute(self, invocation: Invocation) -> Record:
        """The terminal record of ``invocation``: stored on replay, else produced and stored."""
        ...
