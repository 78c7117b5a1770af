"""The read-only view's named queries, written once for every backend (the inspector,
``zincir runs``).

:class:`SnapshotQueries` runs its statements (:func:`~zincir.store._sql.sql`, SQLite's form
with fragments) on a :class:`ReadTx`, one read transaction of a backend's read-only
connection, and shapes the rows alike: JSON columns decoded, content composed, a table
an older schema lacks read as empty, a column it lacks as unset. A run's last seq, update
time and lease expiry are the fragments ``{last_seq}``, ``{updated_at}`` and
``{lease_expiry}`` (on SQLite, as the lease holder's appends left them: the row lags).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from .._encryption import SEALED
from .._json import encode_checked
from .._validate import MAX_SEQUENCE
from ._content import compose_read_rows, event_columns, read_columns
from ._content_rows import read_content
from ._readonly_rows import (
    CheckpointRow,
    EventRow,
    MessageRow,
    OperationOutcomeRow,
    OperationRow,
    OperationSummaryRow,
    PendingToolRow,
    RestartCheckpointRow,
    Row,
    StepRow,
    TimerRow,
    Usage,
    UsageCache,
    decode_columns,
    decode_json,
    event_pages,
    outcome_keys,
    outcomes_in_order,
    row_limit,
    row_seq,
    select_list,
    sum_usage,
    tail_by_seq,
)
from ._readonly_sealing import open_columns
from ._records import RUN_COLUMNS, RunRecord, merge_by_seq
from ._sql import Params, Sql, sql

if TYPE_CHECKING:
    from .._encryption import Sealer

__all__ = ["READ_COLUMNS", "ReadTx", "SnapshotQueries"]

READ_COLUMNS: Final = (
    ("events", "payload_pieces"),
    ("agent_runs", "app_version"),
    ("agent_runs", "lease_ttl_us"),
)
"""Columns an older schema may lack: a backend names each one present among a snapshot's
tables as ``table.column``."""

_RUN_DEFAULTS: Final[dict[str, Any]] = {
    "provider": "",
    "config": "{}",
    "lease_token": 0,
    "last_seq": 0,
    "attempts": 0,
}
_EVENT_COLUMNS: Final = select_list(EventRow)
_CHECKPOINT_COLUMNS: Final = select_list(CheckpointRow)
_OPERATION_COLUMNS: Final = select_list(OperationRow)
_OUTCOME_COLUMNS: Final = select_list(OperationOutcomeRow)
_SUMMARY_COLUMNS: Final = select_list(OperationSummaryRow)
_STEP_COLUMNS: Final = select_list(StepRow)
_TIMER_COLUMNS: Final = select_list(TimerRow)
_MESSAGE_COLUMNS: Final = select_list(MessageRow)
_MODEL_KINDS: Final = "('model_request', 'model_stream')"
_PENDING_COLUMNS: Final = "intent.seq, intent.payload, intent.created_at, intent.tool_call_id"

_ARRIVED: Final = sql(
    "SELECT DISTINCT to_run_id, topic FROM messages "
    "WHERE received_at IS NULL AND to_run_id {in_list}"
)
_ANSWERED: Final = sql(
    "SELECT tool_call_id FROM events WHERE run_id = ? AND type = 'tool_result' "
    "AND tool_call_id {in_list}"
)
_ANSWERED_ARCHIVED: Final = sql(  # an archived intent was answered: compaction keeps open ones
    "SELECT tool_call_id FROM archived_events WHERE run_id = ? AND type = 'tool_call' "
    "AND tool_call_id {in_list}"
)
_RESULT_SEQS: Final = sql(
    "SELECT tool_call_id, seq FROM events WHERE run_id = ? AND type = 'tool_result' "
    "AND tool_call_id {in_list}"
)
_ARCHIVED_AFTER: Final = sql("SELECT 1 FROM archived_events WHERE run_id = ? AND seq > ? LIMIT 1")
_OPEN_INTENTS: Final = sql(
    f"SELECT {_PENDING_COLUMNS} FROM open_intents AS open JOIN events AS intent "
    "ON intent.run_id = open.run_id AND intent.seq = open.seq "
    "WHERE open.run_id = ? ORDER BY open.seq LIMIT ?"
)
_UNANSWERED_INTENTS: Final = sql(  # a schema before ``open_intents``: O(intents)
    f"SELECT {_PENDING_COLUMNS} FROM events AS intent"
    "{indexed_by:events_one_intent} WHERE intent.run_id = ? "
    "AND intent.type = 'tool_call' AND NOT EXISTS (SELECT 1 FROM events AS outcome "
    "WHERE outcome.run_id = intent.run_id AND outcome.type = 'tool_result' "
    "AND outcome.tool_call_id = intent.tool_call_id) ORDER BY intent.seq LIMIT ?"
)
_CHECKPOINTS: Final = sql(
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY round LIMIT ?"
)
_RESTART_CHECKPOINTS: Final = sql(
    "SELECT checkpoint_id, revision, octet_length(payload) AS size, "
    "substr(payload, 1, 200) AS preview, updated_at FROM restart_checkpoints "
    "WHERE run_id = ? ORDER BY checkpoint_id{bytewise} LIMIT ?"
)
_STEPS: Final = sql(
    f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? "
    "ORDER BY started_at, name{bytewise} LIMIT ?"
)
_TIMERS: Final = sql(
    f"SELECT {_TIMER_COLUMNS} FROM timers WHERE run_id = ? "
    "ORDER BY wake_at, name{bytewise} LIMIT ?"
)
_MESSAGES: Final = sql(
    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? OR from_run_id = ? "
    "ORDER BY id LIMIT ?"
)
_SEALED_NAMES: Final = (
    "payload",
    "state",
    "evidence",
    "input_json",
    "record",
    "config",
    "result",
    "last_error",
    "zincir_input_text",
    "zincir_input_parts",
)
"""The columns of the rows these queries read that hold payloads (sealed when encrypted)."""
_COMPOSED_FROM: Final = ("zincir_payload_pieces", "zincir_input_text")
_SEALED_RESTART_CHECKPOINTS: Final = sql(  # the preview is cut after opening
    "SELECT checkpoint_id, revision, octet_length(payload) AS size, payload AS preview, "
    "updated_at FROM restart_checkpoints "
    "WHERE run_id = ? ORDER BY checkpoint_id{bytewise} LIMIT ?"
)
_SEALED_STEPS: Final = sql(  # the ``steps`` view without its look inside the payload
    "SELECT c.run_id, c.name, CASE WHEN c.event_seq IS NULL THEN 'running' "
    "ELSE 'completed' END AS status, c.claim_owner, c.claim_token, "
    "coalesce(e.payload, a.payload) AS result, c.started_at, "
    "coalesce(e.created_at, a.created_at) AS completed_at FROM step_claims AS c "
    "LEFT JOIN events AS e ON e.run_id = c.run_id AND e.seq = c.event_seq "
    "LEFT JOIN archived_events AS a ON e.seq IS NULL AND a.run_id = c.run_id "
    "AND a.seq = c.event_seq WHERE c.run_id = ? ORDER BY c.started_at, c.name{bytewise} LIMIT ?"
)
_OPERATION_PAGE: Final = sql(
    f"SELECT {_SUMMARY_COLUMNS} FROM operations WHERE run_id = ? "
    "ORDER BY created_at DESC, step_id{bytewise} DESC, sequence DESC LIMIT ? OFFSET ?"
)


@lru_cache(maxsize=256)
def _statement(text: str) -> Sql:
    """The statement of ``text``, a query whose columns or source depend on the schema."""
    return sql(text)


def _runs_select(*, leased: bool) -> str:
    """A run's row with its last seq, update time and (``leased``: on a schema that keeps
    the lease's TTL, else the row's own) lease expiry."""
    lease = ", {lease_expiry} AS zincir_lease_expires_at" if leased else ""
    return (
        "SELECT *, {last_seq} AS zincir_last_seq, {updated_at} AS zincir_updated_at"
        f"{lease} FROM agent_runs"
    )


def _run_record(row: Row) -> RunRecord:
    """An ``agent_runs`` row (selected by :func:`_runs_select`) as a RunRecord; a column an
    older schema lacks reads as unset."""
    row["last_seq"], row["updated_at"] = row["zincir_last_seq"], row["zincir_updated_at"]
    if "zincir_lease_expires_at" in row:
        row["lease_expires_at"] = row["zincir_lease_expires_at"]
    return cast(RunRecord, {name: row.get(name, _RUN_DEFAULTS.get(name)) for name in RUN_COLUMNS})


class ReadTx(Protocol):
    """One read transaction of a backend's read-only connection, as the named queries see
    it (a read-only part of :class:`~zincir.store._sql.Tx`); driver errors leave as zincir
    errors. ``sealer`` (None: a plain store) opens the columns a statement ``opens``, in
    :meth:`one`, :meth:`all` and :meth:`rows` alike; a blind one (no keys) opens each as
    ``‹sealed›``."""

    sealer: Sealer | None

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        """The first row of ``statement``, or None."""

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        """Every row of ``statement``."""

    def rows(self, statement: Sql, params: Params = ()) -> list[Row]:
        """Every row of ``statement`` as a dict by column name, times as the store's UTC
        text."""

    def stamp(self, moment: datetime | None) -> object:
        """``moment`` as a parameter (None stays None)."""

    def values(self, items: Sequence[str]) -> object:
        """``items`` as the parameter of ``{in_list}``."""

    def unpack_content(self, body: object) -> str:
        """A stored content body as its text (see :meth:`~._sql.Tx.unpack_content`)."""

    def usage_sums(self, source: str, run_id: str, upto: int, last_seq: int) -> list[Any] | None:
        """(field, total) over the numeric ``usage`` fields of the ``llm_call`` events of
        ``source`` (a log's table, or a union of them) in (upto, last_seq], summed as SQLite
        sums (an int for integers only); None when this database cannot sum them."""


class SnapshotQueries:
    """The named read queries of one snapshot (a base of each backend's snapshot)."""

    _tx: ReadTx
    _tables: frozenset[str]
    _usage_cache: UsageCache

    @property
    def sealed(self) -> bool:
        """Whether the store is encrypted and read without its keys: every payload reads as
        ``‹sealed›``, the structure (ids, statuses, seqs, times, digests) as it is."""
        sealer = self._tx.sealer
        return sealer is not None and sealer.blind

    def _shaped(self, found: list[Row], *, decode: bool = True) -> list[Row]:
        """Rows with their payloads opened (an encrypted store), their content composed and
        (``decode``) their JSON columns decoded."""
        sealer = self._tx.sealer
        if sealer is not None:
            open_columns(sealer, found, _SEALED_NAMES)
            if sealer.blind:  # nothing to compose sealed pieces into
                for row in found:
                    if any(name in row for name in _COMPOSED_FROM):
                        for name in [name for name in row if name.startswith("zincir_")]:
                            del row[name]
        found = compose_read_rows(found, partial(read_content, self._tx))
        return decode_columns(found) if decode else found

    def _rows(self, statement: Sql, params: Params, *, decode: bool = True) -> list[Row]:
        """The shaped rows of ``statement``."""
        return self._shaped(self._tx.rows(statement, params), decode=decode)

    def _present(self, table: str, statement: Sql, params: Params) -> list[Row]:
        """Rows of a table this database may not have (an older schema): empty if absent."""
        return self._rows(statement, params) if table in self._tables else []

    def _event_columns(self) -> str:
        """The columns of an :class:`EventRow` and those its payload is composed from."""
        return event_columns(_EVENT_COLUMNS, self._tables)

    def _stored(self, columns: str) -> str:
        """``columns`` of ``operations`` and those its input and record are composed from."""
        return read_columns(columns, "content" in self._tables)

    def _runs(self, rest: str, params: Params) -> list[RunRecord]:
        """The runs of ``SELECT … FROM agent_runs`` followed by ``rest``."""
        select = _runs_select(leased="agent_runs.lease_ttl_us" in self._tables)
        found = self._rows(_statement(f"{select} {rest}"), params, decode=False)
        return [_run_record(row) for row in found]

    # -- runs -----------------------------------------------------------------------------

    def list_runs(
        self,
        status: str | None = None,
        limit: int = 100,
        *,
        app_version: str | None = None,
        stuck_before: datetime | None = None,
    ) -> list[RunRecord]:
        """The latest runs by update time, optionally of one status and one app version;
        with ``stuck_before`` only live runs that made no progress since then."""
        if app_version is not None and "agent_runs.app_version" not in self._tables:
            return []  # an older schema: no run has a version
        filters = [
            ("status = ?", status),
            ("app_version = ?", app_version),
            (
                "status IN ('pending', 'running') AND {updated_at} < ?",
                None if stuck_before is None else self._tx.stamp(stuck_before),
            ),
        ]
        wanted = [(text, value) for text, value in filters if value]
        where = "WHERE " + " AND ".join(text for text, _ in wanted) if wanted else ""
        return self._runs(
            f"{where} ORDER BY zincir_updated_at DESC, id{{bytewise}} LIMIT ?",
            (*(value for _, value in wanted), row_limit(limit)),
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""
        found = self._runs("WHERE id = ?", (run_id,))
        return found[0] if found else None

    def children(self, run_id: str, limit: int = 500) -> list[RunRecord]:
        """The runs spawned by ``run_id``, oldest first."""
        return self._runs(
            "WHERE parent_id = ? ORDER BY created_at, id{bytewise} LIMIT ?",
            (run_id, row_limit(limit)),
        )

    # -- the log --------------------------------------------------------------------------

    def events(self, run_id: str, after_seq: int = 0, limit: int = 200) -> list[EventRow]:
        """One page of the log after ``after_seq``: keyset on the (run_id, seq) primary key;
        events compaction archived are merged in by seq (one index probe when none are)."""
        params = (run_id, min(max(after_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        select = f"SELECT {self._event_columns()} FROM"
        live = cast(list[EventRow], self._rows(_statement(f"{select} events {page}"), params))
        if not self._archived_after(run_id, params[1]):
            return live
        older = self._rows(_statement(f"{select} archived_events {page}"), params)
        return merge_by_seq(cast(list[EventRow], older), live, row_seq, params[2])

    def _archived_after(self, run_id: str, after_seq: int) -> bool:
        """Whether compaction archived any event of ``run_id`` after ``after_seq`` (False on
        a schema older than the archive)."""
        if "archived_events" not in self._tables:
            return False
        return self._tx.one(_ARCHIVED_AFTER, (run_id, after_seq)) is not None

    def _log_source(self) -> str:
        """The run log to aggregate over: live and archived events (live only on a schema
        older than the archive)."""
        if "archived_events" not in self._tables:
            return "events"
        return (
            "(SELECT run_id, seq, type, payload FROM events UNION ALL "
            "SELECT run_id, seq, type, payload FROM archived_events)"
        )

    def iter_events(
        self, run_id: str, after_seq: int = 0, *, page_size: int = 1000
    ) -> Iterator[EventRow]:
        """Every event after ``after_seq``, read page by page within this snapshot."""
        return event_pages(self.events, run_id, after_seq, page_size)

    def arrived(self, runs: Sequence[RunRecord]) -> set[str]:
        """The ids of those ``runs`` that wait for a message which has arrived (a decided
        approval's among them), in one query."""
        waiting = {(run["id"], run["wait_ref"]) for run in runs if run["wait_kind"] == "message"}
        if not waiting or "messages" not in self._tables:
            return set()
        ids = self._tx.values(sorted({run_id for run_id, _ in waiting}))
        found = {(str(a), str(b)) for a, b in self._tx.all(_ARRIVED, (ids,))}
        return {run_id for run_id, topic in found & waiting}

    def answered(self, run_id: str, call_ids: Sequence[str]) -> set[str]:
        """Which of these tool call ids already have a ``tool_result``."""
        if not call_ids:
            return set()
        queries = [_ANSWERED]
        if "archived_events" in self._tables:
            queries.append(_ANSWERED_ARCHIVED)
        params = (run_id, self._tx.values(list(dict.fromkeys(call_ids))))
        return {str(call_id) for query in queries for (call_id,) in self._tx.all(query, params)}

    def tool_intents(self, run_id: str, call_ids: Sequence[str]) -> list[EventRow]:
        """The ``tool_call`` events (intents) of these call ids, by seq: one lookup each in
        the ``events_one_intent`` index, never a scan of the log."""
        if not call_ids:
            return []
        statement = _statement(
            f"SELECT {self._event_columns()} FROM events"
            "{indexed_by:events_one_intent} WHERE run_id = ? "
            "AND type = 'tool_call' AND tool_call_id {in_list} ORDER BY seq"
        )
        params = (run_id, self._tx.values(list(dict.fromkeys(call_ids))))
        return cast(list[EventRow], self._rows(statement, params))

    def result_seqs(self, run_id: str, call_ids: Sequence[str]) -> dict[str, int]:
        """The seq of the ``tool_result`` of each of these call ids that has one (indexed)."""
        if not call_ids:
            return {}
        params = (run_id, self._tx.values(list(dict.fromkeys(call_ids))))
        return {str(call_id): int(seq) for call_id, seq in self._tx.all(_RESULT_SEQS, params)}

    def pending_tools(self, run_id: str, limit: int = 500) -> list[PendingToolRow]:
        """Tool intents without a result (in doubt after a crash), oldest first: the
        ``open_intents`` table, O(pending) not O(intents)."""
        params = (run_id, row_limit(limit))
        if "open_intents" in self._tables:
            return cast(list[PendingToolRow], self._rows(_OPEN_INTENTS, params))
        found = self._tx.rows(_UNANSWERED_INTENTS, params)
        if self._tx.sealer is not None:
            open_columns(self._tx.sealer, found, ("payload",), run_id)
        for row in found:
            row["payload"] = decode_json(row["payload"])
        return cast(list[PendingToolRow], found)

    def usage(self, run: RunRecord) -> Usage:
        """Totals of the numeric ``usage`` fields of the run's ``llm_call`` events.

        The log is append-only, so totals are cached per run (by id and creation time) and
        only events newer than the cached ones are summed.
        """
        source = self._log_source()
        if self._tx.sealer is not None:  # summed in Python from opened payloads
            return self._usage_cache.usage(run, partial(self._sealed_usage, source))
        return self._usage_cache.usage(
            run, lambda run_id, upto, last: self._tx.usage_sums(source, run_id, upto, last)
        )

    def _sealed_usage(
        self, source: str, run_id: str, upto: int, last_seq: int
    ) -> list[tuple[str, int | float]] | None:
        """The usage sums of an encrypted store, from its opened payloads (None without
        keys: the totals are unknown)."""
        sealer = self._tx.sealer
        if sealer is None or sealer.blind:
            return None
        statement = _statement(
            f"SELECT payload FROM {source} AS e WHERE run_id = ? AND seq > ? AND seq <= ? "
            "AND type = 'llm_call'"
        )
        found = self._tx.all(statement, (run_id, upto, last_seq))
        return sum_usage(sealer.open(payload, run_id) for (payload,) in found)

    # -- durable state --------------------------------------------------------------------

    def checkpoints(self, run_id: str, limit: int = 500) -> list[CheckpointRow]:
        """The run's semantic checkpoints by round."""
        found = self._present("checkpoints", _CHECKPOINTS, (run_id, row_limit(limit)))
        return cast(list[CheckpointRow], found)

    def restart_checkpoints(self, run_id: str, limit: int = 500) -> list[RestartCheckpointRow]:
        """The run's restart checkpoints by id, each payload cut to its first 200 characters."""
        if "restart_checkpoints" not in self._tables:
            return []
        params = (run_id, row_limit(limit))
        sealer = self._tx.sealer
        if sealer is None:
            found = self._rows(_RESTART_CHECKPOINTS, params, decode=False)
            return cast(list[RestartCheckpointRow], found)
        found = self._tx.rows(_SEALED_RESTART_CHECKPOINTS, params)
        for row in found:
            text = sealer.open_text(row["preview"], run_id) or ""
            if text != SEALED or not sealer.blind:
                row["size"] = len(text.encode("utf-8"))
            row["preview"] = text[:200]
        return cast(list[RestartCheckpointRow], found)

    def operations(self, run_id: str, limit: int = 500) -> list[OperationRow]:
        """The run's durable operations, oldest first."""
        statement = _statement(
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = ? "
            "ORDER BY created_at, step_id{bytewise}, sequence LIMIT ?"
        )
        found = self._present("operations", statement, (run_id, row_limit(limit)))
        return cast(list[OperationRow], found)

    def operation_outcomes(
        self, run_id: str, keys: Sequence[tuple[str, int]]
    ) -> list[OperationOutcomeRow]:
        """The state and record of these operations, by primary key (step id, sequence),
        in the order asked; keys with no operation are left out. Inputs are not read."""
        wanted = outcome_keys(keys)
        if not wanted or "operations" not in self._tables:
            return []
        statement = _statement(
            f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations WHERE run_id = ? "
            "AND (step_id, sequence) IN "
            "(SELECT value ->> 0, CAST(value ->> 1 AS bigint) FROM {json_items})"
        )
        return outcomes_in_order(wanted, self._rows(statement, (run_id, encode_checked(wanted))))

    def first_model_request(self, run_id: str, step_id: str | None = None) -> OperationRow | None:
        """The run's first model request (``model_request`` or ``model_stream`` #0), input
        included: a primary-key lookup when ``step_id`` is known, else a pass over the
        run's operations that reads only the leading columns of the ones it skips."""
        where, params = ("AND step_id = ? ", (step_id,)) if step_id is not None else ("", ())
        statement = _statement(
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = ? "
            f"{where}AND sequence = 0 AND kind IN {_MODEL_KINDS} "
            "ORDER BY created_at, step_id{bytewise} LIMIT 1"
        )
        found = self._present("operations", statement, (run_id, *params))
        return cast(OperationRow, found[0]) if found else None

    def steps(self, run_id: str, limit: int = 500) -> list[StepRow]:
        """The run's workflow steps, in the order they started."""
        params = (run_id, row_limit(limit))
        if self._tx.sealer is None:
            return cast(list[StepRow], self._present("steps", _STEPS, params))
        found = self._rows(_SEALED_STEPS, params, decode=False)  # results opened
        for row in found:
            document = decode_json(row["result"])
            if isinstance(document, dict):  # the step's completion event: its result
                row["result"] = encode_checked(document.get("result"))
        return cast(list[StepRow], decode_columns(found))

    def timers(self, run_id: str, limit: int = 500) -> list[TimerRow]:
        """The run's workflow timers by wake time."""
        return cast(list[TimerRow], self._present("timers", _TIMERS, (run_id, row_limit(limit))))

    def messages(self, run_id: str, limit: int = 500) -> list[MessageRow]:
        """Messages sent to or from the run, oldest first."""
        found = self._present("messages", _MESSAGES, (run_id, run_id, row_limit(limit)))
        return cast(list[MessageRow], found)

    # -- bounded reads of a long run (the inspector's pages) ------------------------------

    def events_before(self, run_id: str, before_seq: int, limit: int = 200) -> list[EventRow]:
        """The last ``limit`` events before ``before_seq``, in seq order: keyset on the
        (run_id, seq) primary key read backwards, archived events merged in."""
        params = (run_id, min(max(before_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
        select = f"SELECT {self._event_columns()} FROM"
        live = self._rows(_statement(f"{select} events {page}"), params)
        archived = _statement(f"{select} archived_events {page}")
        older = self._present("archived_events", archived, params)
        return tail_by_seq(cast(list[EventRow], older), cast(list[EventRow], live), params[2])

    def operation_page(
        self, run_id: str, offset: int = 0, limit: int = 50
    ) -> list[OperationSummaryRow]:
        """One page of the run's operations, newest first, without inputs or records."""
        params = (run_id, row_limit(limit), row_limit(offset))
        return cast(list[OperationSummaryRow], self._present("operations", _OPERATION_PAGE, params))

    def failed_operations(
        self, run_id: str, kind: str, limit: int = 500
    ) -> list[OperationOutcomeRow]:
        """The run's operations of ``kind`` whose record is a failure, newest first, records
        included (inputs not read)."""
        statement = _statement(
            f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations "
            "WHERE run_id = ? AND kind = ? AND outcome = 'failure' "
            "ORDER BY created_at DESC, step_id{bytewise} DESC, sequence DESC LIMIT ?"
        )
        found = self._present("operations", statement, (run_id, kind, row_limit(limit)))
        return cast(list[OperationOutcomeRow], found)

    def operation(self, run_id: str, step_id: str, sequence: int) -> OperationRow | None:
        """One operation, input and record whole, by its primary key."""
        statement = _statement(
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations "
            "WHERE run_id = ? AND step_id = ? AND sequence = ?"
        )
        found = self._present("operations", statement, (run_id, step_id, row_limit(sequence)))
        return cast(OperationRow, found[0]) if found else None
