"""PostgreSQL: model responses, tool intents and semantic checkpoints (the
bring-your-own-loop log).

Every write here is one fenced append: the run's row lock taken by :func:`append` orders
the run's writers, so checkpoint rounds are numbered without gaps and an intent's result is
recorded once (closing an intent deletes its ``open_intents`` row; a racing second result
waits for that row and then finds it gone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import errors

from ..._json import loads_strict
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
from ._base import Conn, PostgresBase, one
from ._log import append
from ._runs import read_events

__all__ = ["AgentOps", "write_entries"]

_ONE_INTENT = "events_one_intent"  # the unique index of intents per (run, call id)


def write_entries(
    conn: Conn,
    lease: Lease,
    entries: Sequence[LogEntry],
    leading: Sequence[NewEvent] = (),
) -> int:
    """Append ``leading`` events, then each entry's events (a response's ``llm_call`` and
    ``tool_call`` intents, a ``tool_result``), in one fenced append; open the new intents
    and close the answered ones. Returns the last seq.

    UnknownToolCall for a result without an intent, DuplicateToolCall for a result given
    twice or an intent whose call id the run already has (the transaction then stores
    nothing: the caller's transaction must end with the raise).
    """
    run_id = lease.run_id
    events, opened = entry_events(
        run_id, entries, leading, lambda call_id: _close_intent(conn, run_id, call_id)
    )
    try:
        last_seq = append(conn, lease, events)
    except errors.UniqueViolation as error:
        if error.diag.constraint_name != _ONE_INTENT:
            raise
        raise duplicate_intent(run_id) from None
    if opened:
        first = last_seq - len(events) + 1
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO open_intents (run_id, tool_call_id, seq) VALUES (%s, %s, %s)",
                [(run_id, call_id, first + index) for call_id, index in opened.items()],
            )
    return last_seq


def _close_intent(conn: Conn, run_id: str, call_id: str) -> None:
    """Delete the open intent ``call_id`` (its row lock makes a racing result wait, then
    find it gone); UnknownToolCall without an intent, DuplicateToolCall once answered."""
    closed = conn.execute(
        "DELETE FROM open_intents WHERE run_id = %s AND tool_call_id = %s RETURNING 1",
        (run_id, call_id),
    ).fetchone()
    if closed is not None:
        return
    intent = conn.execute(
        "SELECT 1 FROM events WHERE run_id = %s AND type = 'tool_call' AND tool_call_id = %s "
        "UNION ALL SELECT 1 FROM archived_events WHERE run_id = %s AND type = 'tool_call' "
        "AND tool_call_id = %s",
        (run_id, call_id, run_id, call_id),
    ).fetchone()
    raise result_error(call_id, run_id, has_intent=intent is not None)


def _load_state(conn: Conn, run_id: str) -> RunState:
    """A run's status, config, latest accepted checkpoint and the events after it, from
    one snapshot."""
    run = conn.execute(
        "SELECT status, config, last_seq FROM agent_runs WHERE id = %s", (run_id,)
    ).fetchone()
    if run is None:
        raise run_not_found(run_id)
    status, config, last_seq = run
    row = conn.execute(
        f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s "
        "AND status = 'accepted' ORDER BY round DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    checkpoint = None if row is None else checkpoint_record(row)
    after = 0 if checkpoint is None else int(checkpoint.decided_seq or 0)
    return RunState(
        run_id,
        str(status),
        loads_strict(config),
        int(last_seq),
        checkpoint,
        read_events(conn, run_id, after),
    )


class AgentOps(PostgresBase):
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
        call id already has an intent in the run. ``durable=False`` commits without waiting
        for the server's disk (for entries rebuilt from elsewhere after a crash)."""
        entry = ResponseEntry(response_json, tuple(intents))
        last_seq = await self._write(
            lambda conn: write_entries(conn, lease, [entry]), durable=durable
        )
        return last_seq - len(intents)

    async def record_tool_result(
        self, lease: Lease, call_id: str, result_json: str, *, durable: bool = True
    ) -> int:
        """Append the ``tool_result`` of an open intent; return its seq. UnknownToolCall
        without an intent, DuplicateToolCall when it already has a result. ``durable`` as
        for :meth:`record_response`."""
        entry = ToolResultEntry(call_id, result_json)
        return await self._write(lambda conn: write_entries(conn, lease, [entry]), durable=durable)

    async def open_intents(self, run_id: str) -> list[Any]:
        """The payloads of tool intents without a result, in the order they were recorded."""

        def read(conn: Conn) -> list[Any]:
            return [
                loads_strict(payload)
                for (payload,) in conn.execute(
                    "SELECT intent.payload FROM open_intents AS open JOIN events AS intent "
                    "ON intent.run_id = open.run_id AND intent.seq = open.seq "
                    "WHERE open.run_id = %s ORDER BY open.seq",
                    (run_id,),
                )
            ]

        return await self._read(read)

    async def propose_checkpoint(
        self, lease: Lease, candidate: Mapping[str, Any], state_json: str
    ) -> CheckpointRecord:
        """Store a candidate (next round) and its ``checkpoint_proposed`` event, fenced.

        ``candidate`` is the JSON-ready form already encoded as ``state_json``. The fence's
        row lock makes the round number safe against a racing proposal.
        """
        run_id = lease.run_id

        def write(conn: Conn) -> CheckpointRecord:
            lineage = append(conn, lease)
            (round_no,) = one(
                conn,
                "SELECT COALESCE(MAX(round), 0) + 1 FROM checkpoints WHERE run_id = %s",
                (run_id,),
            )
            (checkpoint_id,) = one(
                conn,
                "INSERT INTO checkpoints (run_id, round, status, state, lineage_seq, "
                "proposed_seq, created_at) VALUES (%s, %s, 'proposed', %s, %s, %s, zincir_now()) "
                "RETURNING id",
                (run_id, round_no, state_json, lineage, lineage + 1),
            )
            record, event = proposed_checkpoint(
                int(checkpoint_id), int(round_no), lineage, candidate
            )
            append(conn, lease, [event])
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

        def write(conn: Conn) -> int:
            seq = append(conn, lease, [event])
            decided = conn.execute(
                "UPDATE checkpoints SET status = %s, evidence = %s, decided_seq = %s, "
                "decided_at = zincir_now() WHERE id = %s AND status = 'proposed' RETURNING 1",
                (status, evidence_json, seq, checkpoint.id),
            ).fetchone()
            if decided is None:
                raise already_decided(checkpoint, lease.run_id)
            return seq

        return await self._write(write)

    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest candidate still waiting for its verifier decision, or None."""

        def read(conn: Conn) -> CheckpointRecord | None:
            row = conn.execute(
                f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s "
                "AND status = 'proposed' ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            return None if row is None else checkpoint_record(row)

        return await self._read(read)

    async def load_state(self, run_id: str) -> RunState:
        """Status, config, the latest accepted checkpoint and only the events after it."""
        return await self._read(lambda conn: _load_state(conn, run_id))
