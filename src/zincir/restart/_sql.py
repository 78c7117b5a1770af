"""``SQLRestartStore``: restart checkpoints kept in the zincir store, beside the runs."""

from __future__ import annotations

import builtins
from typing import Any

from .._validate import check_id
from ..store import Store
from ..store._restart_records import RestartRow
from ._checks import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_key,
    check_max_payload,
    checkpoint,
    encode_payload,
)
from ._protocol import RestartCheckpoint

__all__ = ["SQLRestartStore"]


def _checkpoint(row: RestartRow) -> RestartCheckpoint:
    return checkpoint(row.run_id, row.checkpoint_id, row.revision, row.payload_json)


class SQLRestartStore:
    """A :class:`RestartStore` in a zincir ``Store``: each save is one write transaction, so
    of several processes saving one revision exactly one stores it.

    ``max_payload_bytes`` bounds a payload as JSON (1 MiB by default).
    """

    def __init__(self, store: Store, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        self.store = store
        self.max_payload_bytes = check_max_payload(max_payload_bytes)

    async def load(self, run_id: str, checkpoint_id: str) -> RestartCheckpoint | None:
        """The stored checkpoint, or None."""
        run_id, checkpoint_id = check_key(run_id, checkpoint_id)
        row = await self.store.load_restart_checkpoint(run_id, checkpoint_id)
        return None if row is None else _checkpoint(row)

    async def save(
        self, run_id: str, checkpoint_id: str, revision: int, payload: Any
    ) -> RestartCheckpoint:
        """Store ``revision`` with ``payload`` and return what is stored; RevisionConflict if
        it is older than the stored revision or differs from it at the same revision."""
        run_id, checkpoint_id, revision, text = encode_payload(
            run_id, checkpoint_id, revision, payload, self.max_payload_bytes
        )
        row = await self.store.save_restart_checkpoint(run_id, checkpoint_id, revision, text)
        return _checkpoint(row)

    async def remove(self, run_id: str, checkpoint_id: str) -> bool:
        """Delete the checkpoint; whether there was one. A later save starts it afresh."""
        run_id, checkpoint_id = check_key(run_id, checkpoint_id)
        return await self.store.remove_restart_checkpoint(run_id, checkpoint_id)

    async def list(self, run_id: str) -> builtins.list[RestartCheckpoint]:
        """The run's checkpoints, ordered by checkpoint id (for tooling)."""
        run_id = check_id(run_id, "a run id")
        return [_checkpoint(row) for row in await self.store.list_restart_checkpoints(run_id)]
