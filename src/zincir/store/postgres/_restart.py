"""Restart checkpoints: the ``restart_checkpoints`` table behind ``SQLRestartStore``
(PostgreSQL).

A save is one conditional upsert that moves the stored revision forward only, and locks the
row it conflicts with; so of several processes saving the same revision exactly one stores
it, the others get RevisionConflict, and a revision never goes backwards. Callers
(``SQLRestartStore``) check ids, the revision and the payload before they call; the payload
arrives as the JSON text ``zincir._json.dumps`` produced.
"""

from __future__ import annotations

from typing import Final

from ..._errors import StoreError
from .._restart_records import RESTART_COLUMNS, RestartRow, repeated_revision, restart_row
from ._base import Conn, PostgresBase

__all__ = ["RestartOps"]

_KEY: Final = "run_id = %s AND checkpoint_id = %s"
_SELECT: Final = f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE {_KEY}"
_FORWARD: Final = (
    f"INSERT INTO restart_checkpoints ({RESTART_COLUMNS}) VALUES (%s, %s, %s, %s, zincir_now()) "
    "ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET revision = excluded.revision, "
    "payload = excluded.payload, updated_at = excluded.updated_at "
    f"WHERE restart_checkpoints.revision < excluded.revision RETURNING {RESTART_COLUMNS}"
)


def _select(conn: Conn, run_id: str, checkpoint_id: str) -> RestartRow | None:
    found = conn.execute(_SELECT, (run_id, checkpoint_id)).fetchone()
    return None if found is None else restart_row(found)


def _save(
    conn: Conn, run_id: str, checkpoint_id: str, revision: int, payload_json: str
) -> RestartRow:
    """Store the revision if it moves the checkpoint forward; the stored row if it repeats
    it; RevisionConflict (nothing written) if it is older or diverges."""
    moved = conn.execute(_FORWARD, (run_id, checkpoint_id, revision, payload_json)).fetchone()
    if moved is not None:
        return restart_row(moved)
    # The upsert locked the newer-or-equal row it conflicted with; read that committed row.
    stored = _select(conn, run_id, checkpoint_id)
    if stored is None:
        raise StoreError(f"checkpoint {checkpoint_id!r} vanished while being saved")
    if repeated_revision(stored, revision, payload_json):  # RevisionConflict if older or diverging
        return stored
    # Older than this revision, yet the upsert did not move it: it cannot be, as the upsert
    # holds the row's lock until COMMIT.
    raise StoreError(f"checkpoint {checkpoint_id!r} changed while being saved")


class RestartOps(PostgresBase):
    """Load, save (forward-only revisions), remove and list restart checkpoints."""

    async def load_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> RestartRow | None:
        """The stored checkpoint, or None."""
        return await self._read(lambda conn: _select(conn, run_id, checkpoint_id))

    async def save_restart_checkpoint(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartRow:
        """Store ``revision`` if it is newer than the stored one and return the stored row."""
        return await self._write(
            lambda conn: _save(conn, run_id, checkpoint_id, revision, payload_json)
        )

    async def remove_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        """Delete the checkpoint; whether there was one."""

        def remove(conn: Conn) -> bool:
            deleted = conn.execute(
                f"DELETE FROM restart_checkpoints WHERE {_KEY} RETURNING 1", (run_id, checkpoint_id)
            ).fetchone()
            return deleted is not None

        return await self._write(remove)

    async def list_restart_checkpoints(self, run_id: str) -> list[RestartRow]:
        """The run's checkpoints, ordered by checkpoint id (bytewise, as on SQLite)."""
        sql = (
            f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE run_id = %s "
            'ORDER BY checkpoint_id COLLATE "C"'
        )
        return await self._read(
            lambda conn: [restart_row(found) for found in conn.execute(sql, (run_id,))]
        )
