"""Restart checkpoints: the ``restart_checkpoints`` table behind ``SQLRestartStore``
(PostgreSQL).

A save is one conditional upsert that moves the stored revision forward only, and locks the
row it conflicts with; so of several processes saving the same revision exactly one stores
it, the others get RevisionConflict, and a revision never goes backwards. Callers
(``SQLRestartStore``) check ids, the revision and the payload before they call; the payload
arrives as the JSON text ``zincir._json.dumps`` produced.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..._errors import RevisionConflict, StoreError
from ..._json import loads_strict
from .._restart_records import RestartRow
from ._base import Conn, PostgresBase

__all__ = ["RestartOps"]

_KEY: Final = "run_id = %s AND checkpoint_id = %s"
_COLUMNS: Final = "run_id, checkpoint_id, revision, payload, updated_at"
_SELECT: Final = f"SELECT {_COLUMNS} FROM restart_checkpoints WHERE {_KEY}"
_FORWARD: Final = (
    f"INSERT INTO restart_checkpoints ({_COLUMNS}) VALUES (%s, %s, %s, %s, zincir_now()) "
    "ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET revision = excluded.revision, "
    "payload = excluded.payload, updated_at = excluded.updated_at "
    f"WHERE restart_checkpoints.revision < excluded.revision RETURNING {_COLUMNS}"
)


def _row(found: tuple[Any, ...]) -> RestartRow:
    run_id, checkpoint_id, revision, payload, updated_at = found
    return RestartRow(run_id, checkpoint_id, int(revision), payload, updated_at)


def _select(conn: Conn, run_id: str, checkpoint_id: str) -> RestartRow | None:
    found = conn.execute(_SELECT, (run_id, checkpoint_id)).fetchone()
    return None if found is None else _row(found)


def _canonical(text: str) -> str:
    """One spelling of a JSON value (keys sorted), so key order does not make two payloads
    differ while ``1``, ``1.0`` and ``true`` stay distinct."""
    return json.dumps(loads_strict(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _same_payload(stored: str, offered: str) -> bool:
    return stored == offered or _canonical(stored) == _canonical(offered)


def _save(
    conn: Conn, run_id: str, checkpoint_id: str, revision: int, payload_json: str
) -> RestartRow:
    """Store the revision if it moves the checkpoint forward; the stored row if it repeats
    it; RevisionConflict (nothing written) if it is older or diverges."""
    moved = conn.execute(_FORWARD, (run_id, checkpoint_id, revision, payload_json)).fetchone()
    if moved is not None:
        return _row(moved)
    # The upsert locked the newer-or-equal row it conflicted with; read that committed row.
    stored = _select(conn, run_id, checkpoint_id)
    if stored is None:
        raise StoreError(f"checkpoint {checkpoint_id!r} vanished while being saved")
    if revision == stored.revision and _same_payload(stored.payload_json, payload_json):
        return stored
    if revision < stored.revision:
        raise RevisionConflict(
            f"checkpoint {checkpoint_id!r} is at revision {stored.revision}; revision "
            f"{revision} is older: load the checkpoint and continue from there",
            run_id=run_id,
        )
    raise RevisionConflict(
        f"checkpoint {checkpoint_id!r} already holds revision {stored.revision} with "
        f"another payload; offered revision {revision} diverges from it: save the "
        "next revision instead",
        run_id=run_id,
    )


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
            f"SELECT {_COLUMNS} FROM restart_checkpoints WHERE run_id = %s "
            'ORDER BY checkpoint_id COLLATE "C"'
        )
        return await self._read(
            lambda conn: [_row(found) for found in conn.execute(sql, (run_id,))]
        )
