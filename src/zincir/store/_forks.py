"""Forks of a run, written once: a new run holding its source's history before a seq, which
nobody owns, so the next ``Runner.resume``, ``AgentContext.recover``, ``WorkflowContext.open``
or ``ResumeWorker`` takes it over at once and continues live from the point.

One transaction copies, for the new run: the events before the point (same seqs; those the
source archived stay archived up to the fork's own latest accepted checkpoint), the open
intents among them, the operation rows whose ``operation_completed`` is in that prefix (a
completed record never changes), the steps completed in it, the checkpoints proposed in it
(one decided later is still proposed in the fork), the timers set in it (fired only if
they fired in it), the messages received in it, and the source's content references
(content stays shared, never copied).
Stream items, restart checkpoints and approvals are not copied: a fork's stream starts at
its first new item, and a call paused in the fork asks for its approval again. The source
is only read (on PostgreSQL its row is held ``FOR SHARE`` until COMMIT, so its owner's
next write and a compaction wait for the copy).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from .._errors import InvalidInput
from .._time import from_db
from .._validate import check_id
from ._log import EVENT_COLUMNS, copy_log_prefix, insert_forked_run
from ._records import RUN_COLUMNS, RUN_SEALED, RunRecord
from ._run_rules import run_exists_error, run_not_found
from ._runs import run_record
from ._sql import Rules, Tx, sql

if TYPE_CHECKING:
    from ._readonly_queries import ReadTx

__all__ = ["FORK_KINDS", "ForkOps", "ForkReads", "RunOrigin", "fork_run"]

FORK_KINDS: Final = ("fork", "rewind")

_REFS: Final = sql(
    "INSERT INTO content_refs (run_id, hash) SELECT ?, hash FROM content_refs "
    "WHERE run_id = ? ON CONFLICT DO NOTHING"
)
"""First, so a prune sweeping content (which holds ``content_refs`` in SHARE mode on
PostgreSQL) either finished before (the source is then gone) or waits for this COMMIT."""
_SOURCE: Final = sql(
    "SELECT name, provider, config, app_version, lease_token, {last_seq} "
    "FROM agent_runs WHERE id = ?{for_share}",
    opens=(2,),
    run_param=0,
)
_RUN: Final = sql(
    f"SELECT {', '.join(RUN_COLUMNS)} FROM agent_runs WHERE id = ?", opens=RUN_SEALED, run_param=0
)
_MARKS: Final = {
    table: sql(
        f"SELECT seq, type, tool_call_id, payload FROM {table} WHERE run_id = ? AND seq < ? "
        "AND type IN ('tool_call', 'tool_result', 'operation_completed', 'budget_set', "
        "'timer_set', 'timer_completed', 'recv_timed_out', 'message_received')"
    )
    for table in ("events", "archived_events")
}
"""The events of the prefix that decide which rows of other tables the fork holds (their
payloads opened by :func:`_read_prefix`, only where read)."""
_THROUGH: Final = sql(
    "SELECT max(decided_seq) FROM checkpoints "
    "WHERE run_id = ? AND status = 'accepted' AND decided_seq < ?"
)
_COPY_ARCHIVED: Final = sql(
    f"INSERT INTO archived_events (run_id, {EVENT_COLUMNS}) SELECT ?, {EVENT_COLUMNS} "
    "FROM archived_events WHERE run_id = ? AND seq <= ? "
    "AND NOT (type = 'tool_call' AND tool_call_id {in_list})"
)
_OPEN: Final = sql("INSERT INTO open_intents (run_id, tool_call_id, seq) VALUES (?, ?, ?)")
_OPERATION_COLUMNS: Final = (
    "step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome, record, "
    "claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at, "
    "claim_lease_owner, claim_lease_token, input_parts"
)
_COPY_OPERATION: Final = sql(
    f"INSERT INTO operations (run_id, {_OPERATION_COLUMNS}) SELECT ?, {_OPERATION_COLUMNS} "
    "FROM operations WHERE run_id = ? AND step_id = ? AND sequence = ? AND status = 'completed'"
)
_COPY_STEPS: Final = sql(
    "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, event_seq, started_at) "
    "SELECT ?, name, claim_owner, claim_token, event_seq, started_at FROM step_claims "
    "WHERE run_id = ? AND event_seq IS NOT NULL AND event_seq < ?"
)
_COPY_CHECKPOINTS: Final = sql(
    "INSERT INTO checkpoints (run_id, round, status, state, evidence, lineage_seq, "
    "proposed_seq, decided_seq, created_at, decided_at) "
    "SELECT ?, round, CASE WHEN decided_seq < ? THEN status ELSE 'proposed' END, state, "
    "CASE WHEN decided_seq < ? THEN evidence END, lineage_seq, proposed_seq, "
    "CASE WHEN decided_seq < ? THEN decided_seq END, created_at, "
    "CASE WHEN decided_seq < ? THEN decided_at END "
    "FROM checkpoints WHERE run_id = ? AND proposed_seq < ? ORDER BY round"
)
_COPY_TIMER: Final = sql(
    "INSERT INTO timers (run_id, name, wake_at, completed_at, created_at) "
    "SELECT ?, name, wake_at, CASE WHEN ? = 1 THEN completed_at END, created_at "
    "FROM timers WHERE run_id = ? AND name = ?"
)
_COPY_RECEIVED: Final = sql(
    "INSERT INTO messages (to_run_id, topic, payload, from_run_id, send_key, created_at, "
    "received_by, received_at) "
    "SELECT ?, topic, payload, from_run_id, CASE WHEN from_run_id IS NULL THEN send_key END, "
    "created_at, received_by, received_at FROM messages "
    "WHERE to_run_id = ? AND received_by = ?"
)
_ORIGIN: Final = sql(
    "INSERT INTO run_origins (run_id, source_run_id, at_seq, kind, created_at) "
    "VALUES (?, ?, ?, ?, zincir_now())"
)
_FORKS_LIMIT: Final = 100_000  # the forks of one run a store read returns at most
_ORIGIN_COLUMNS: Final = "run_id, source_run_id, at_seq, kind, created_at"
_ORIGIN_OF: Final = sql(f"SELECT {_ORIGIN_COLUMNS} FROM run_origins WHERE run_id = ?")
_FORKS_OF: Final = sql(
    f"SELECT {_ORIGIN_COLUMNS} FROM run_origins WHERE source_run_id = ? "
    "ORDER BY created_at, run_id{bytewise} LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class RunOrigin:
    """Where run ``run_id`` came from: the history of ``source_run_id`` before ``at_seq``,
    copied by a ``fork`` or a ``rewind`` at ``created_at``."""

    run_id: str
    source_run_id: str
    at_seq: int
    kind: str
    created_at: datetime


def _origin(row: Sequence[Any], time: Any) -> RunOrigin:
    run_id, source, at_seq, kind, created_at = row
    return RunOrigin(str(run_id), str(source), int(at_seq), str(kind), time(created_at))


@dataclass(slots=True)
class _Prefix:
    """What the prefix's events say about the other tables."""

    open_intents: dict[str, int]
    operations: set[tuple[str, int]]
    budget: str | None
    timers: dict[str, bool]  # set in the prefix: whether it also fired there
    received: list[str]  # receive keys


def _read_prefix(tx: Tx, source: str, at_seq: int) -> _Prefix:
    rows = sorted(
        (
            row
            for table in ("archived_events", "events")
            for row in tx.all(_MARKS[table], (source, at_seq))
        ),
        key=lambda row: int(row[0]),
    )
    prefix = _Prefix({}, set(), None, {}, [])
    sealer = tx.sealer
    for seq, kind, call_id, payload in rows:
        if sealer is not None and kind not in ("tool_call", "tool_result"):
            payload = sealer.open_text(payload, source)
        if kind == "tool_call":
            prefix.open_intents[str(call_id)] = int(seq)
        elif kind == "tool_result":
            prefix.open_intents.pop(str(call_id), None)
        elif kind == "budget_set":
            prefix.budget = str(payload)
        else:
            fields = json.loads(payload)
            if kind == "operation_completed":
                prefix.operations.add(_record_key(fields))
            elif kind == "timer_set":
                prefix.timers.setdefault(str(fields["name"]), False)
            elif kind in ("timer_completed", "recv_timed_out"):
                prefix.timers[str(fields["name"])] = True
            else:  # message_received
                prefix.received.append(str(fields["key"]))
    return prefix


def _record_key(fields: dict[str, Any]) -> tuple[str, int]:
    """The operation identity (step id, sequence) an ``operation_completed`` event names."""
    return str(fields["step_id"]), int(fields["sequence"])


def fork_run(
    tx: Tx,
    source: str,
    at_seq: int,
    new_run_id: str,
    config_json: str | None,
    name: str | None,
    kind: str,
) -> RunRecord:
    """Create ``new_run_id`` holding ``source``'s history before ``at_seq`` (see the module);
    RunNotFound, InvalidInput (the point) or RunExists, with nothing stored."""
    tx.execute(_REFS, (new_run_id, source))
    found = tx.one(_SOURCE, (source,))
    if found is None:
        raise run_not_found(source)
    source_name, provider, source_config, app_version, token, last_seq = found
    if not 1 <= at_seq <= int(last_seq) + 1:
        raise InvalidInput(
            f"cannot fork at seq {at_seq}: the run's log ends at seq {int(last_seq)}; pass an "
            f"at_seq from 1 to {int(last_seq) + 1} (the fork holds the events before it)",
            run_id=source,
        )
    prefix = _read_prefix(tx, source, at_seq)
    created = insert_forked_run(
        tx,
        new_run_id,
        name=source_name if name is None else name,
        status="running" if at_seq > 1 else "pending",
        provider=provider,
        config_json=source_config if config_json is None else config_json,
        app_version=app_version,
        budget_json=prefix.budget,
        lease_token=int(token),
        last_seq=at_seq - 1,
    )
    if not created:
        raise run_exists_error(new_run_id, "choose another id for the fork, or omit it")
    through_row = tx.one(_THROUGH, (source, at_seq))
    through = 0 if through_row is None or through_row[0] is None else int(through_row[0])
    kept_live = tx.values(list(prefix.open_intents))
    copy_log_prefix(tx, new_run_id, source, at_seq, through=through, kept_live=kept_live)
    tx.execute(_COPY_ARCHIVED, (new_run_id, source, through, kept_live))
    tx.executemany(_OPEN, [(new_run_id, call, seq) for call, seq in prefix.open_intents.items()])
    tx.executemany(
        _COPY_OPERATION, [(new_run_id, source, *key) for key in sorted(prefix.operations)]
    )
    tx.execute(_COPY_STEPS, (new_run_id, source, at_seq))
    tx.execute(_COPY_CHECKPOINTS, (new_run_id, *[at_seq] * 4, source, at_seq))
    tx.executemany(
        _COPY_TIMER,
        [(new_run_id, int(fired), source, timer) for timer, fired in prefix.timers.items()],
    )
    tx.executemany(_COPY_RECEIVED, [(new_run_id, source, key) for key in prefix.received])
    tx.execute(_ORIGIN, (new_run_id, source, at_seq, kind))
    row = tx.one(_RUN, (new_run_id,))
    assert row is not None, "the fork's row was just inserted"
    return run_record(row)


def check_fork(source_run_id: object, at_seq: object, new_run_id: object, kind: object) -> None:
    """InvalidInput for a malformed source or new id, point or kind, before any write."""
    source = check_id(source_run_id)
    check_id(new_run_id, "the new run's id", run_id=source)
    if isinstance(at_seq, bool) or not isinstance(at_seq, int):
        raise InvalidInput(f"at_seq must be an int, not {at_seq!r}", run_id=source)
    if kind not in FORK_KINDS:
        raise InvalidInput(f"a run's origin is one of {FORK_KINDS}, not {kind!r}", run_id=source)


class ForkOps(Rules):
    """Forks of a run: the copy of its history before a seq, and where runs came from."""

    async def fork_run(
        self,
        source_run_id: str,
        *,
        at_seq: int,
        new_run_id: str,
        config_json: str | None = None,
        name: str | None = None,
        kind: str = "fork",
    ) -> RunRecord:
        """Create run ``new_run_id`` holding ``source_run_id``'s history before ``at_seq``,
        unowned (the next owner takes it over at once), in one transaction; the source is
        only read. RunNotFound, InvalidInput (``1 <= at_seq <= last_seq + 1``) or RunExists,
        with nothing stored."""
        check_fork(source_run_id, at_seq, new_run_id, kind)
        return await self._write_tx(
            lambda tx: fork_run(tx, source_run_id, at_seq, new_run_id, config_json, name, kind)
        )

    async def run_origin(self, run_id: str) -> RunOrigin | None:
        """Where run ``run_id`` came from, or None for a run that is no fork."""

        def read(tx: Tx) -> RunOrigin | None:
            row = tx.one(_ORIGIN_OF, (run_id,))
            return None if row is None else _origin(row, tx.time)

        return await self._read_tx(read)

    async def forks_of(self, run_id: str) -> list[RunOrigin]:
        """The runs forked from ``run_id`` (oldest first)."""
        return await self._read_tx(
            lambda tx: [_origin(row, tx.time) for row in tx.all(_FORKS_OF, (run_id, _FORKS_LIMIT))]
        )


class ForkReads:
    """Forks as the read-only view shows them; a database without the table (an older
    schema) has none."""

    _tx: ReadTx
    _tables: frozenset[str]

    def run_origin(self, run_id: str) -> RunOrigin | None:
        """Where run ``run_id`` came from, or None."""
        if "run_origins" not in self._tables:
            return None
        row = self._tx.one(_ORIGIN_OF, (run_id,))
        return None if row is None else _origin(row, _stored_time)

    def forks_of(self, run_id: str, limit: int = 500) -> list[RunOrigin]:
        """The runs forked from ``run_id``, oldest first, at most ``limit``."""
        if "run_origins" not in self._tables:
            return []
        rows = self._tx.all(_FORKS_OF, (run_id, limit))
        return [_origin(row, _stored_time) for row in rows]


def _stored_time(value: Any) -> datetime:
    """A time as either read-only connection returns it: SQLite's text, PostgreSQL's
    timestamptz."""
    return value if isinstance(value, datetime) else from_db(str(value))
