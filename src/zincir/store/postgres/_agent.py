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

from ..._errors import CheckpointError, DuplicateToolCall, RunNotFound, UnknownToolCall
from ..._json import dumps, encode_checked, loads_strict
from .._records import (
    CheckpointRecord,
    Lease,
    LogEntry,
    NewEvent,
    ResponseEntry,
    RunState,
    ToolResultEntry,
)
from ._base import Conn, PostgresBase, one
from ._log import append
from ._runs import read_events

__all__ = ["AgentOps", "write_entries"]

_CHECKPOINT_COLUMNS = (
    "id, round, status, state, evidence, lineage_seq, proposed_seq, decided_seq, decided_at"
)
_ONE_INTENT = "events_one_intent"  # the unique index of intents per (run, call id)


def _checkpoint(row: Sequence[Any]) -> CheckpointRecord:
    cid, round_no, status, state, evidence, lineage, proposed, decided, decided_at = row
    return CheckpointRecord(
        int(cid),
        int(round_no),
        str(status),
        loads_strict(state),
        None if evidence is None else loads_strict(evidence),
        int(lineage),
        int(proposed),
        None if decided is None else int(decided),
        decided_at,
    )


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
    events = list(leading)
    opened: dict[str, int] = {}  # intents of these entries still open: call id -> index
    answered: set[str] = set()
    for entry in entries:
        if isinstance(entry, ResponseEntry):
            events.append(NewEvent("llm_call", entry.response_json))
            for call_id, body in entry.intents:
                opened[call_id] = len(events)
                events.append(NewEvent("tool_call", body, call_id))
            continue
        call_id = entry.call_id
        if call_id in answered:
            raise DuplicateToolCall(f"tool call {call_id!r} already has a result", run_id=run_id)
        if opened.pop(call_id, None) is None:
            _close_intent(conn, run_id, call_id)
        answered.add(call_id)
        events.append(NewEvent("tool_result", entry.result_json, call_id))
    try:
        last_seq = append(conn, lease, events)
    except errors.UniqueViolation as error:
        if error.diag.constraint_name != _ONE_INTENT:
            raise
        raise DuplicateToolCall(
            "a tool call id in this response already has an intent in this run; nothing was stored",
            run_id=run_id,
        ) from None
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
        "SELECT 1 FROM events WHERE run_id = %s AND type = 'tool_call' AND tool_call_id = %s",
        (run_id, call_id),
    ).fetchone()
    if intent is None:
        raise UnknownToolCall(
            f"no tool intent {call_id!r}; record_response must record it first", run_id=run_id
        )
    raise DuplicateToolCall(f"tool call {call_id!r} already has a result", run_id=run_id)


def _load_state(conn: Conn, run_id: str) -> RunState:
    """A run's status, config, latest accepted checkpoint and the events after it, from
    one snapshot."""
    run = conn.execute(
        "SELECT status, config, last_seq FROM agent_runs WHERE id = %s", (run_id,)
    ).fetchone()
    if run is None:
        raise RunNotFound(f"no run {run_id!r} in this store", run_id=run_id)
    status, config, last_seq = run
    row = conn.execute(
        f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s "
        "AND status = 'accepted' ORDER BY round DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    checkpoint = None if row is None else _checkpoint(row)
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
            event = encode_checked(
                {
                    "checkpoint_id": checkpoint_id,
                    "round": round_no,
                    "lineage_seq": lineage,
                    "candidate": candidate,
                }
            )
            append(conn, lease, [NewEvent("checkpoint_proposed", event)])
            return CheckpointRecord(
                int(checkpoint_id),
                int(round_no),
                "proposed",
                candidate,
                None,
                lineage,
                lineage + 1,
                None,
                None,
            )

        return await self._write(write)

    async def decide_checkpoint(
        self, lease: Lease, checkpoint: CheckpointRecord, accepted: bool, evidence: Any
    ) -> int:
        """Store the verifier's one decision on a proposed checkpoint with its event;
        CheckpointError (nothing stored) when it was already decided."""
        status = "accepted" if accepted else "rejected"
        evidence_json = dumps(evidence, what="verifier evidence", run_id=lease.run_id)
        event = encode_checked(
            {
                "checkpoint_id": checkpoint.id,
                "round": checkpoint.round,
                "lineage_seq": checkpoint.lineage_seq,
                "evidence": evidence,
            }
        )

        def write(conn: Conn) -> int:
            seq = append(conn, lease, [NewEvent(f"checkpoint_{status}", event)])
            decided = conn.execute(
                "UPDATE checkpoints SET status = %s, evidence = %s, decided_seq = %s, "
                "decided_at = zincir_now() WHERE id = %s AND status = 'proposed' RETURNING 1",
                (status, evidence_json, seq, checkpoint.id),
            ).fetchone()
            if decided is None:
                raise CheckpointError(
                    f"checkpoint {checkpoint.id} already has a verifier decision",
                    run_id=lease.run_id,
                )
            return seq

        return await self._write(write)

    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest candidate still waiting for its verifier decision, or None."""

        def read(conn: Conn) -> CheckpointRecord | None:
            row = conn.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s "
                "AND status = 'proposed' ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            return None if row is None else _checkpoint(row)

        return await self._read(read)

    async def load_state(self, run_id: str) -> RunState:
        """Status, config, the latest accepted checkpoint and only the events after it."""
        return await self._read(lambda conn: _load_state(conn, run_id))
