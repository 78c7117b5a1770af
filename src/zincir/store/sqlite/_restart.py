"""Restart checkpoints: the ``restart_checkpoints`` table behind ``SQLRestartStore``.

A save reads the stored revision and writes in one write transaction, so of several
processes saving the same revision exactly one stores it and the others get
RevisionConflict. Callers (``SQLRestartStore``) check ids, the revision and the payload
before they call; the payload arrives as the JSON text ``zincir._json.dumps`` produced.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import apsw

from ..._time import from_db, to_db
from .._restart_records import RESTART_COLUMNS, RestartRow, repeated_revision, restart_row
from ._base import SQLiteBase

__all__ = ["RestartOps"]

_KEY: Final = "run_id = ? AND checkpoint_id = ?"
_SELECT: Final = f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE {_KEY}"
_UPSERT: Final = (
    f"INSERT INTO restart_checkpoints ({RESTART_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET revision = excluded.revision, "
    "payload = excluded.payload, updated_at = excluded.updated_at"
)


def _row(found: tuple[Any, ...]) -> RestartRow:
    return restart_row(found, from_db)


def _select(conn: apsw.Connection, run_id: str, checkpoint_id: str) -> RestartRow | None:
    found = conn.execute(_SELECT, (run_id, checkpoint_id)).fetchone()
    return None if found is None else _row(found)


def _save(
    conn: apsw.Connection,
    now: datetime,
    run_id: str,
    checkpoint_id: str,
    revision: int,
    payload_json: str,
) -> RestartRow:
    """Store the revision if it moves the checkpoint forward; the stored row if it repeats
    it; RevisionConflict (nothing written) if it is older or diverges."""
    stored = _select(conn, run_id, checkpoint_id)
    if stored is not None and repeated_revision(stored, revision, payload_json):
        return stored
    stamp = to_db(now)
    conn.execute(_UPSERT, (run_id, checkpoint_id, revision, payload_json, stamp))
    return RestartRow(run_id, checkpoint_id, revision, payload_json, from_db(stamp))


class RestartOps(SQLiteBase):
    """Load, save (forward-only revisions), remove and list restart checkpoints."""

    async def load_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> RestartRow | None:
        """The stored checkpoint, or None."""
        return await self._read(lambda conn: _select(conn, run_id, checkpoint_id))

    async def save_restart_checkpoint(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartRow:
        """Store ``revision`` if it is newer than the stored one and return the stored row."""
        now = self.clock()
        return await self._write(
            lambda conn: _save(conn, now, run_id, checkpoint_id, revision, payload_json)
        )

    async def remove_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        """Delete the checkpoint; whether there was one."""

        def remove(conn: apsw.Connection) -> bool:
            conn.execute(f"DELETE FROM restart_checkpoints WHERE {_KEY}", (run_id, checkpoint_id))
            return bool(conn.changes())

        return await self._write(remove)

    async def list_restart_checkpoints(self, run_id: str) -> list[RestartRow]:
        """The run's checkpoints, ordered by checkpoint id."""
        sql = (
            f"SELECT {RESTART_COLUMNS} FROM restart_checkpoints WHERE run_id = ? "
            "ORDER BY checkpoint_id"
        )
        return await self._read(
            lambda conn: [_row(found) for found in conn.execute(sql, (run_id,))], offload=True
        )
