"""Restart checkpoints: the ``restart_checkpoints`` table behind ``SQLRestartStore``.

A save reads the stored revision and writes in one write transaction, so of several
processes saving the same revision exactly one stores it and the others get
RevisionConflict. Callers (``SQLRestartStore``) check ids, the revision and the payload
before they call; the payload arrives as the JSON text ``zincir._json.dumps`` produced.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

import apsw

from ..._errors import RevisionConflict
from ..._json import loads_strict
from ..._time import from_db, to_db
from .._restart_records import RestartRow
from ._base import SQLiteBase

__all__ = ["RestartOps"]

_KEY: Final = "run_id = ? AND checkpoint_id = ?"
_COLUMNS: Final = "run_id, checkpoint_id, revision, payload, updated_at"
_SELECT: Final = f"SELECT {_COLUMNS} FROM restart_checkpoints WHERE {_KEY}"
_UPSERT: Final = (
    f"INSERT INTO restart_checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET revision = excluded.revision, "
    "payload = excluded.payload, updated_at = excluded.updated_at"
)


def _row(found: tuple[Any, ...]) -> RestartRow:
    run_id, checkpoint_id, revision, payload, updated_at = found
    return RestartRow(run_id, checkpoint_id, int(revision), payload, from_db(updated_at))


def _select(conn: apsw.Connection, run_id: str, checkpoint_id: str) -> RestartRow | None:
    found = conn.execute(_SELECT, (run_id, checkpoint_id)).fetchone()
    return None if found is None else _row(found)


def _canonical(text: str) -> str:
    """One spelling of a JSON value (keys sorted), so key order does not make two payloads
    differ while ``1``, ``1.0`` and ``true`` stay distinct."""
    return json.dumps(loads_strict(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _same_payload(stored: str, offered: str) -> bool:
    return stored == offered or _canonical(stored) == _canonical(offered)


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
    if stored is not None:
        if revision < stored.revision:
            raise RevisionConflict(
                f"checkpoint {checkpoint_id!r} is at revision {stored.revision}; revision "
                f"{revision} is older: load the checkpoint and continue from there",
                run_id=run_id,
            )
        if revision == stored.revision:
            if _same_payload(stored.payload_json, payload_json):
                return stored
            raise RevisionConflict(
                f"checkpoint {checkpoint_id!r} already holds revision {stored.revision} with "
                f"another payload; offered revision {revision} diverges from it: save the "
                "next revision instead",
                run_id=run_id,
            )
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
        sql = f"SELECT {_COLUMNS} FROM restart_checkpoints WHERE run_id = ? ORDER BY checkpoint_id"
        return await self._read(
            lambda conn: [_row(found) for found in conn.execute(sql, (run_id,))], offload=True
        )
