"""Model responses, tool intents and semantic checkpoints (the bring-your-own-loop log)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import apsw

from ..._json import loads_strict
from ..._time import from_db, to_db
from .._agent_log import (
    already_decided,
    checkpoint_decision,
    duplicate_intent,
    entry_events,
    proposed_checkpoint,
    result_error,
)
from .._records import (
    CHECKPOINT_COLUMNS,
    CheckpointRecord,
    Lease,
    LogEntry,
    NewEvent,
    ResponseEntry,
    RunState,
    ToolResultEntry,
    checkpoint_record,
)
from .._run_rules import run_not_found
from ._base import SQLiteBase, one
from ._log import append, last_seq_sql
from ._runs import _INLINE_EVENTS, read_events

__all__ = ["AgentOps", "write_entries"]


def _checkpoint(row: tuple[Any, ...]) -> CheckpointRecord:
    return checkpoint_record(row, from_db)


def write_entries(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    entries: Sequence[LogEntry],
    leading: Sequence[NewEvent] = (),
    *,
    stamp: str | None = None,
) -> int:
    """Append ``leading`` events, then each entry's events (a response's ``llm_call`` and
    ``tool_call`` intents, a ``tool_result``), in one fenced append; open the new intents
    and close the answered ones. Returns the last seq. ``stamp`` is ``now`` as stored.

    UnknownToolCall for a result without an intent, DuplicateToolCall for a result given
    twice or an intent whose call id the run already has.
    """
    run_id = lease.run_id
    events, opened = entry_events(
        run_id, entries, leading, lambda call_id: _close_intent(conn, run_id, call_id)
    )
    try:
        last_seq = append(conn, lease, now, events, stamp=stamp)
    except apsw.ConstraintError:  # the unique index of intents per (run, call id)
        raise duplicate_intent(run_id) from None
    if opened:
        first = last_seq - len(events) + 1
        conn.executemany(
            "INSERT INTO open_intents (run_id, tool_call_id, seq) VALUES (?, ?, ?)",
            [(run_id, call_id, first + index) for call_id, index in opened.items()],
        )
    return last_seq


def _close_intent(conn: apsw.Connection, run_id: str, call_id: str) -> None:
    closed = conn.execute(
        "DELETE FROM open_intents WHERE run_id = ? AND tool_call_id = ? RETURNING 1",
        (run_id, call_id),
    ).fetchone()
    if closed is not None:
        return
    intent = conn.execute(
        "SELECT 1 FROM events WHERE run_id = ? AND type = 'tool_call' AND tool_call_id = ? "
        "UNION ALL SELECT 1 FROM archived_events WHERE run_id = ? AND type = 'tool_call' "
        "AND tool_call_id = ?",
        (run_id, call_id, run_id, call_id),
    ).fetchone()
    raise result_error(call_id, run_id, has_intent=intent is not None)


class AgentOps(SQLiteBase):
    """Responses and tool intents, tool results, checkpoints, and the fresh-context state."""

    async def record_response(
        self,
        lease: Lease,
        response_json: str,
        intents: Sequence[tuple[str, str]],
        *,
        durable: bool = True,
    ) -> int:
        """Append ``llm_call`` and one ``tool_call`` intent per (call id, JSON) in one
        transaction; return the ``llm_call`` seq. DuplicateToolCall (nothing stored) when a
        call id already has an intent in the run. ``durable=False`` may skip the fsync (for
        entries rebuilt from elsewhere after a power loss)."""
        entry = ResponseEntry(response_json, tuple(intents))
        last_seq = await self._write(
            lambda conn: write_entries(conn, lease, self.clock(), [entry]), durable=durable
        )
        return last_seq - len(intents)

    async def record_tool_result(
        self, lease: Lease, call_id: str, result_json: str, *, durable: bool = True
    ) -> int:
        """Append the ``tool_result`` of an open intent; return its seq. UnknownToolCall
        without an intent, DuplicateToolCall when it already has a result. ``durable`` as
        for :meth:`record_response`."""
        entry = ToolResultEntry(call_id, result_json)
        return await self._write(
            lambda conn: write_entries(conn, lease, self.clock(), [entry]), durable=durable
        )

    async def open_intents(self, run_id: str) -> list[Any]:
        """The payloads of tool intents without a result, in the order they were recorded."""

        def read(conn: apsw.Connection) -> list[Any]:
            return [
                loads_strict(payload)
                for (payload,) in conn.execute(
                    "SELECT intent.payload FROM open_intents AS open JOIN events AS intent "
                    "ON intent.run_id = open.run_id AND intent.seq = open.seq "
                    "WHERE open.run_id = ? ORDER BY open.seq",
                    (run_id,),
                )
            ]

        return await self._read(read)

    async def propose_checkpoint(
        self, lease: Lease, candidate: Mapping[str, Any], state_json: str
    ) -> CheckpointRecord:
        """Store a candidate (next round) and its ``checkpoint_proposed`` event, fenced.

        ``candidate`` is the JSON-ready form already encoded as ``state_json``.
        """
        run_id = lease.run_id

        def write(conn: apsw.Connection) -> CheckpointRecord:
            now = self.clock()
            lineage = append(conn, lease, now)
            (round_no,) = one(
                conn,
                "SELECT COALESCE(MAX(round), 0) + 1 FROM checkpoints WHERE run_id = ?",
                (run_id,),
            )
            (checkpoint_id,) = one(
                conn,
                "INSERT INTO checkpoints (run_id, round, status, state, lineage_seq, "
                "proposed_seq, created_at) VALUES (?, ?, 'proposed', ?, ?, ?, ?) RETURNING id",
                (run_id, round_no, state_json, lineage, lineage + 1, to_db(now)),
            )
            record, event = proposed_checkpoint(
                int(checkpoint_id), int(round_no), lineage, candidate
            )
            append(conn, lease, now, [event])
            return record

        return await self._write(write)

    async def decide_checkpoint(
        self, lease: Lease, checkpoint: CheckpointRecord, accepted: bool, evidence: Any
    ) -> int:
        """Store the verifier's one decision on a proposed checkpoint with its event;
        CheckpointError (nothing stored) when it was already decided."""
        status, evidence_json, event = checkpoint_decision(
            checkpoint, accepted, evidence, lease.run_id
        )

        def write(conn: apsw.Connection) -> int:
            now = self.clock()
            seq = append(conn, lease, now, [event])
            decided = conn.execute(
                "UPDATE checkpoints SET status = ?, evidence = ?, decided_seq = ?, "
                "decided_at = ? WHERE id = ? AND status = 'proposed' RETURNING 1",
                (status, evidence_json, seq, to_db(now), checkpoint.id),
            ).fetchone()
            if decided is None:
                raise already_decided(checkpoint, lease.run_id)
            return seq

        return await self._write(write)

    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest candidate still waiting for its verifier decision, or None."""

        def read(conn: apsw.Connection) -> CheckpointRecord | None:
            row = conn.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? "
                "AND status = 'proposed' ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            return None if row is None else _checkpoint(row)

        return await self._read(read)

    async def load_state(self, run_id: str) -> RunState:
        """Status, config, the latest accepted checkpoint and only the events after it.

        A short tail is read on the calling thread; a long one on a worker thread.
        """

        def read(conn: apsw.Connection, *, inline: bool) -> RunState | None:
            run = conn.execute(
                f"SELECT status, config, {last_seq_sql()} FROM agent_runs WHERE id = ?", (run_id,)
            ).fetchone()
            if run is None:
                raise run_not_found(run_id)
            status, config, last_seq = run
            row = conn.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? "
                "AND status = 'accepted' ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            checkpoint = None if row is None else _checkpoint(row)
            after = 0 if checkpoint is None else int(checkpoint.decided_seq or 0)
            if inline and int(last_seq) - after > _INLINE_EVENTS:
                return None
            return RunState(
                run_id,
                str(status),
                loads_strict(config),
                int(last_seq),
                checkpoint,
                read_events(conn, run_id, after),
            )

        state = await self._read(lambda conn: read(conn, inline=True))
        if state is None:
            state = await self._read(lambda conn: read(conn, inline=False), offload=True)
        assert state is not None
        return state
