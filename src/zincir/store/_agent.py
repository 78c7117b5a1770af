"""The bring-your-own-loop log, written once: model responses with their tool intents, tool
results, semantic checkpoints, and a run's fresh-context state.

Every write is one fenced append (:meth:`Tx.append`), which orders the run's writers (on
PostgreSQL by the run's row lock until COMMIT, on SQLite by its one writer): checkpoint
rounds are numbered without gaps and an intent's result is recorded once (closing an intent
deletes its ``open_intents`` row; a racing second result waits for that row and then finds
it gone). A response whose call id already has an intent in the run is refused by the
events' unique index, which no insert gets past.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._json import loads_strict
from ._agent_log import (
    already_decided,
    checkpoint_decision,
    duplicate_intent,
    entry_events,
    proposed_checkpoint,
    result_error,
)
from ._records import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_SEALED,
    CheckpointRecord,
    Lease,
    LogEntry,
    NewEvent,
    ResponseEntry,
    RunState,
    ToolResultEntry,
    checkpoint_record,
)
from ._run_rules import run_not_found
from ._runs import INLINE_EVENTS, read_events
from ._sql import Rules, Tx, sql

__all__ = ["AgentOps", "write_entries"]

_ONE_INTENT: Final = "events_one_intent"
"""The unique index of intents per (run, call id)."""
_OPEN: Final = sql("INSERT INTO open_intents (run_id, tool_call_id, seq) VALUES (?, ?, ?)")
_CLOSE: Final = sql("DELETE FROM open_intents WHERE run_id = ? AND tool_call_id = ? RETURNING 1")
_INTENT: Final = sql(
    "SELECT 1 FROM events WHERE run_id = ? AND type = 'tool_call' AND tool_call_id = ? "
    "UNION ALL SELECT 1 FROM archived_events WHERE run_id = ? AND type = 'tool_call' "
    "AND tool_call_id = ?"
)
_OPEN_PAYLOADS: Final = sql(
    "SELECT intent.payload FROM open_intents AS open JOIN events AS intent "
    "ON intent.run_id = open.run_id AND intent.seq = open.seq "
    "WHERE open.run_id = ? ORDER BY open.seq",
    opens=(0,),
    run_param=0,
)
_NEXT_ROUND: Final = sql("SELECT COALESCE(MAX(round), 0) + 1 FROM checkpoints WHERE run_id = ?")
_PROPOSE: Final = sql(
    "INSERT INTO checkpoints (run_id, round, status, state, lineage_seq, proposed_seq, "
    "created_at) VALUES (?, ?, 'proposed', ?, ?, ?, zincir_now()) RETURNING id",
    seals=(2,),
    run_param=0,
)
_DECIDE: Final = sql(
    "UPDATE checkpoints SET status = ?, evidence = ?, decided_seq = ?, "
    "decided_at = zincir_now() WHERE id = ? AND status = 'proposed' RETURNING 1",
    seals=(1,),
)
_PROPOSED, _ACCEPTED = (
    sql(
        f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? "
        f"AND status = '{status}' ORDER BY round DESC LIMIT 1",
        opens=CHECKPOINT_SEALED,
        run_param=0,
    )
    for status in ("proposed", "accepted")
)
"""The latest checkpoint of a run waiting for its decision, and the latest accepted."""
_RUN: Final = sql(
    "SELECT status, config, {last_seq} FROM agent_runs WHERE id = ?", opens=(1,), run_param=0
)


def write_entries(
    tx: Tx, lease: Lease, entries: Sequence[LogEntry], leading: Sequence[NewEvent] = ()
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
        run_id, entries, leading, lambda call_id: _close_intent(tx, run_id, call_id)
    )
    try:
        last_seq = tx.append(lease, events)
    except Exception as error:
        if not tx.violates(error, _ONE_INTENT):
            raise
        raise duplicate_intent(run_id) from None
    if opened:
        first = last_seq - len(events) + 1
        tx.executemany(
            _OPEN, [(run_id, call_id, first + index) for call_id, index in opened.items()]
        )
    return last_seq


def _close_intent(tx: Tx, run_id: str, call_id: str) -> None:
    """Delete the open intent ``call_id``; UnknownToolCall without an intent,
    DuplicateToolCall once answered."""
    if tx.one(_CLOSE, (run_id, call_id)) is not None:
        return
    intent = tx.one(_INTENT, (run_id, call_id, run_id, call_id))
    raise result_error(call_id, run_id, has_intent=intent is not None)


def _propose(
    tx: Tx, lease: Lease, candidate: Mapping[str, Any], state_json: str
) -> CheckpointRecord:
    """Store a candidate as the run's next round and append its ``checkpoint_proposed``
    (the fence taken first numbers the round safely)."""
    run_id = lease.run_id
    lineage = tx.append(lease)
    next_round = tx.one(_NEXT_ROUND, (run_id,))
    assert next_round is not None, "an aggregate returns one row"
    round_no = int(next_round[0])
    created = tx.one(_PROPOSE, (run_id, round_no, state_json, lineage, lineage + 1))
    assert created is not None, "an insert without a conflict clause returns its row"
    record, event = proposed_checkpoint(int(created[0]), round_no, lineage, candidate)
    tx.append(lease, [event])
    return record


def _decide(
    tx: Tx, lease: Lease, checkpoint: CheckpointRecord, decision: tuple[str, str, NewEvent]
) -> int:
    """Append the decision's event and store it on the checkpoint; CheckpointError when it
    was already decided (nothing is stored)."""
    status, evidence_json, event = decision
    seq = tx.append(lease, [event])
    if tx.one(_DECIDE, (status, evidence_json, seq, checkpoint.id)) is None:
        raise already_decided(checkpoint, lease.run_id)
    return seq


def _load_state(tx: Tx, run_id: str, *, inline: bool) -> RunState | None:
    """A run's status, config, latest accepted checkpoint and the events after it, from one
    snapshot; None when ``inline`` and the tail is too long to read on the caller's thread."""
    run = tx.one(_RUN, (run_id,))
    if run is None:
        raise run_not_found(run_id)
    status, config, last_seq = run
    row = tx.one(_ACCEPTED, (run_id,))
    checkpoint = None if row is None else checkpoint_record(row, tx.time)
    after = 0 if checkpoint is None else int(checkpoint.decided_seq or 0)
    if inline and int(last_seq) - after > INLINE_EVENTS:
        return None
    events = read_events(tx, run_id, after)
    return RunState(run_id, str(status), loads_strict(config), int(last_seq), checkpoint, events)


class AgentOps(Rules):
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
        call id already has an intent in the run. ``durable=False`` may commit without
        waiting for the disk (for entries rebuilt from elsewhere after a crash)."""
        entry = ResponseEntry(response_json, tuple(intents))
        last_seq = await self._write_tx(
            lambda tx: write_entries(tx, lease, [entry]), durable=durable
        )
        return last_seq - len(intents)

    async def record_tool_result(
        self, lease: Lease, call_id: str, result_json: str, *, durable: bool = True
    ) -> int:
        """Append the ``tool_result`` of an open intent; return its seq. UnknownToolCall
        without an intent, DuplicateToolCall when it already has a result. ``durable`` as
        for :meth:`record_response`."""
        entry = ToolResultEntry(call_id, result_json)
        return await self._write_tx(lambda tx: write_entries(tx, lease, [entry]), durable=durable)

    async def open_intents(self, run_id: str) -> list[Any]:
        """The payloads of tool intents without a result, in the order they were recorded."""
        return await self._read_tx(
            lambda tx: [loads_strict(payload) for (payload,) in tx.all(_OPEN_PAYLOADS, (run_id,))]
        )

    async def propose_checkpoint(
        self, lease: Lease, candidate: Mapping[str, Any], state_json: str
    ) -> CheckpointRecord:
        """Store a candidate (next round) and its ``checkpoint_proposed`` event, fenced.

        ``candidate`` is the JSON-ready form already encoded as ``state_json``.
        """
        return await self._write_tx(lambda tx: _propose(tx, lease, candidate, state_json))

    async def decide_checkpoint(
        self, lease: Lease, checkpoint: CheckpointRecord, accepted: bool, evidence: Any
    ) -> int:
        """Store the verifier's one decision on a proposed checkpoint with its event;
        CheckpointError (nothing stored) when it was already decided."""
        decision = checkpoint_decision(checkpoint, accepted, evidence, lease.run_id)
        return await self._write_tx(lambda tx: _decide(tx, lease, checkpoint, decision))

    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """The latest candidate still waiting for its verifier decision, or None."""

        def read(tx: Tx) -> CheckpointRecord | None:
            row = tx.one(_PROPOSED, (run_id,))
            return None if row is None else checkpoint_record(row, tx.time)

        return await self._read_tx(read)

    async def load_state(self, run_id: str) -> RunState:
        """Status, config, the latest accepted checkpoint and only the events after it.

        A short tail is read on the calling thread; a long one on a worker thread.
        """
        state = await self._read_tx(lambda tx: _load_state(tx, run_id, inline=True))
        if state is None:
            state = await self._read_tx(
                lambda tx: _load_state(tx, run_id, inline=False), offload=True
            )
        assert state is not None
        return state
