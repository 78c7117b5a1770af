"""Restart checkpoints: the ``restart_checkpoints`` table behind ``SQLRestartStore``.

A save is one conditional upsert that moves the stored revision forward only (on
PostgreSQL it locks the row it conflicts with; SQLite runs one writer), so of several
processes saving the same revision exactly one stores it, the others get RevisionConflict,
and a revision never goes backwards. Callers (``SQLRestartStore``) check ids, the revision
and the payload before they call; the payload arrives as the JSON text
``zincir._json.dumps`` produced.
"""

from __future__ import annotations

from typing import Final

from .._errors import StoreError
from ._restart_records import (
    RESTART_COLUMNS,
    RESTART_PAYLOAD,
    RestartRow,
    repeated_revision,
    restart_row,
)
from ._sql import Rules, Tx, sql

__all__ = ["RestartOps"]

_KEY: Final = "run_id = ? AND checkpoint_id = ?"
_SELECT: Final = sql(
    f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE {_KEY}",
    opens=(RESTART_PAYLOAD,),
    run_param=0,
)
_FORWARD: Final = sql(
    f"INSERT INTO restart_checkpoints ({RESTART_COLUMNS}) VALUES (?, ?, ?, ?, zincir_now()) "
    "ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET revision = excluded.revision, "
    "payload = excluded.payload, updated_at = excluded.updated_at "
    f"WHERE restart_checkpoints.revision < excluded.revision RETURNING {RESTART_COLUMNS}",
    seals=(RESTART_PAYLOAD,),
    opens=(RESTART_PAYLOAD,),
    run_param=0,
)
_REMOVE: Final = sql(f"DELETE FROM restart_checkpoints WHERE {_KEY} RETURNING 1")
_LIST: Final = sql(
    f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE run_id = ? "
    "ORDER BY checkpoint_id{bytewise}",
    opens=(RESTART_PAYLOAD,),
    run_param=0,
)


def _select(tx: Tx, run_id: str, checkpoint_id: str) -> RestartRow | None:
    found = tx.one(_SELECT, (run_id, checkpoint_id))
    return None if found is None else restart_row(found, tx.time)


def _save(tx: Tx, run_id: str, checkpoint_id: str, revision: int, payload_json: str) -> RestartRow:
    """Store the revision if it moves the checkpoint forward; the stored row if it repeats
    it; RevisionConflict (nothing written) if it is older or diverges."""
    moved = tx.one(_FORWARD, (run_id, checkpoint_id, revision, payload_json))
    if moved is not None:
        return restart_row(moved, tx.time)
    # The upsert did not move the newer-or-equal row it conflicted with (on PostgreSQL it
    # holds that row's lock until COMMIT): read it.
    stored = _select(tx, run_id, checkpoint_id)
    if stored is None:
        raise StoreError(f"checkpoint {checkpoint_id!r} vanished while being saved")
    if repeated_revision(stored, revision, payload_json):  # RevisionConflict if older or diverging
        return stored
    raise StoreError(f"checkpoint {checkpoint_id!r} changed while being saved")


class RestartOps(Rules):
    """Load, save (forward-only revisions), remove and list restart checkpoints."""

    async def load_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> RestartRow | None:
        """The stored checkpoint, or None."""
        return await self._read_tx(lambda tx: _select(tx, run_id, checkpoint_id))

    async def save_restart_checkpoint(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartRow:
        """Store ``revision`` if it is newer than the stored one and return the stored row."""
        return await self._write_tx(
            lambda tx: _save(tx, run_id, checkpoint_id, revision, payload_json)
        )

    async def remove_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        """Delete the checkpoint; whether there was one."""
        return await self._write_tx(lambda tx: tx.one(_REMOVE, (run_id, checkpoint_id)) is not None)

    async def list_restart_checkpoints(self, run_id: str) -> list[RestartRow]:
        """The run's checkpoints, ordered by checkpoint id (bytewise, on every backend)."""
        return await self._read_tx(
            lambda tx: [restart_row(found, tx.time) for found in tx.all(_LIST, (run_id,))],
            offload=True,
        )
