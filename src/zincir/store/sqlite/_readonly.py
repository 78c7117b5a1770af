"""A read-only view of a zincir SQLite file (the inspector, ``zincir runs``).

It never creates, migrates or writes the file: each :meth:`ReadOnlyDatabase.snapshot`
opens ``file:PATH?mode=ro`` (``SQLITE_OPEN_READONLY``, ``query_only``), checks that the
file is a zincir database this code can read, reads in one transaction and closes. The
named queries return typed rows whose JSON columns are decoded (text that is not strict
JSON is kept as it is), and a table a database does not have yet reads as empty. The
LangGraph thread queries live in ``_readonly_threads``. Driver errors leave as zincir
errors, damaged pages as :class:`~zincir.DatabaseCorrupt`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Final, TypeVar, cast
from urllib.parse import quote

import apsw

from ..._errors import DatabaseCorrupt, InvalidInput, NotAZincirDatabase
from ..._time import to_db
from ..._validate import MAX_SEQUENCE, utf8
from .._content import EVENT_PIECES, compose_read_rows, event_columns, read_columns
from .._readonly_rows import (
    REQUIRED_TABLES,
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
    tail_by_seq,
)
from .._records import RUN_COLUMNS, RunRecord, merge_by_seq
from .._thread_rows import PREVIEW_BYTES
from ._base import check_zincir_file, migrations, refuse_directory
from ._content import reader
from ._errors import DRIVER_ERRORS, close_quietly, translate
from ._log import last_seq_sql, lease_expiry_sql, register_functions, updated_at_sql
from ._readonly_threads import ThreadReads

__all__ = ["PREVIEW_BYTES", "ReadOnlyDatabase", "SnapshotReader"]

T = TypeVar("T")

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
_MODEL_KINDS: Final = "('model_request', 'model_stream')"
_MAX_KEYS: Final = 500  # ids bound per IN (...) list, well under SQLite's variable limit
_STEP_COLUMNS: Final = select_list(StepRow)
_TIMER_COLUMNS: Final = select_list(TimerRow)
_MESSAGE_COLUMNS: Final = select_list(MessageRow)


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """The driver-error boundary of a read: text that is not UTF-8 means damaged pages."""
    try:
        yield
    except UnicodeDecodeError:
        raise DatabaseCorrupt(
            f"{path} holds text that is not valid UTF-8, so it is damaged (or was written by "
            "another program); check it with `sqlite3 FILE 'PRAGMA integrity_check'` and "
            "restore it from a backup"
        ) from None
    except DRIVER_ERRORS as error:
        raise translate(error, path) from None


def _as_dict(cursor: apsw.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.getdescription(), row, strict=True)}


def _runs_select(*, lease: bool) -> str:
    """A run's row, with its last seq, update time and (``lease``: on a schema that keeps the
    lease's TTL) lease expiry as the lease holder's appends left them (the row lags)."""
    derived = [f"{last_seq_sql()} AS zincir_last_seq", f"{updated_at_sql()} AS zincir_updated_at"]
    if lease:
        derived.append(f"{lease_expiry_sql()} AS zincir_lease_expires_at")
    return f"SELECT *, {', '.join(derived)} FROM agent_runs"


def _run_record(row: dict[str, Any]) -> RunRecord:
    """An ``agent_runs`` row (selected by :func:`_runs_select`) as a RunRecord; a column an
    older schema lacks reads as unset."""
    row["last_seq"], row["updated_at"] = row["zincir_last_seq"], row["zincir_updated_at"]
    if "zincir_lease_expires_at" in row:
        row["lease_expires_at"] = row["zincir_lease_expires_at"]
    return cast(RunRecord, {name: row.get(name, _RUN_DEFAULTS.get(name)) for name in RUN_COLUMNS})


class ReadOnlyDatabase:
    """A zincir SQLite file opened read-only: one short connection per snapshot."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        text = os.fspath(path)
        if not isinstance(text, str) or "\x00" in text or utf8(text) is None:
            raise InvalidInput(
                f"the database path {text!r} must be UTF-8 text without NUL; rename the file "
                "or folder"
            )
        self.path = os.path.abspath(text)
        self.known_version = migrations()[-1][0]
        self.usage_cache = UsageCache()

    def _connect(self) -> apsw.Connection:
        refuse_directory(self.path)
        if not os.path.isfile(self.path):
            raise NotAZincirDatabase(
                f"there is no database at {self.path}; run `zincir demo` or your application "
                "to create one, or pass --db PATH (reading never creates a database)"
            )
        uri = "file:" + quote(self.path) + "?mode=ro"
        with _reading(self.path):
            conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            register_functions(conn)
            with _reading(self.path):
                conn.setbusytimeout(5000)
                conn.execute("PRAGMA query_only=1")
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    def _tables(self, conn: apsw.Connection) -> frozenset[str]:
        """The file's tables, after refusing a file that is not a readable zincir database."""
        try:
            applied = check_zincir_file(conn, self.path)
        except NotAZincirDatabase as error:
            raise NotAZincirDatabase(f"{error.detail} (it holds no zincir schema)") from None
        with _reading(self.path):
            tables = frozenset(
                str(name)
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')"
                )
            )
            if (
                "events" in tables
                and conn.execute(
                    "SELECT 1 FROM pragma_table_info('events') WHERE name = 'payload_pieces'"
                ).fetchone()
            ):
                tables |= {EVENT_PIECES}
        if not applied or not REQUIRED_TABLES <= tables:
            raise NotAZincirDatabase(
                f"{self.path} holds no zincir schema; run `zincir demo` or your application "
                "(which migrates it with `zincir migrate`) first, or pass --db PATH"
            )
        return tables

    def check(self) -> None:
        """Raise unless the file is a zincir database this code can read (NotAZincirDatabase,
        SchemaTooNew, DatabaseCorrupt, ...)."""
        with self.snapshot():
            pass

    def copy_to(self, target: str) -> None:
        """Copy the database, one consistent snapshot of it, into the new file ``target``
        (SQLite's backup API reading through a read-only connection: this file is never
        written). For work that must not touch the original (``zincir check-compat``)."""
        if os.path.exists(target):
            raise InvalidInput(f"{target} exists; copy_to writes a new file")
        source = self._connect()
        try:
            self._tables(source)
            with _reading(self.path):
                copy = apsw.Connection(target)
                try:
                    with copy.backup("main", source, "main") as backup:
                        while not backup.done:
                            backup.step(-1)
                finally:
                    close_quietly(copy)
        finally:
            close_quietly(source)

    @contextmanager
    def snapshot(self) -> Iterator[SnapshotReader]:
        """A :class:`SnapshotReader` over one consistent read transaction."""
        conn = self._connect()
        try:
            with _reading(self.path):
                conn.execute("BEGIN")
            yield SnapshotReader(conn, self, self._tables(conn))
        finally:
            try:
                with _reading(self.path):
                    if not conn.getautocommit():
                        conn.execute("COMMIT")
            finally:
                close_quietly(conn)


class SnapshotReader(ThreadReads):
    """The named read queries, inside one read transaction of a :class:`ReadOnlyDatabase`."""

    def __init__(
        self, conn: apsw.Connection, database: ReadOnlyDatabase, tables: frozenset[str]
    ) -> None:
        self._conn = conn
        self._database = database
        self._tables = tables
        self._runs_sql: str | None = None

    @property
    def path(self) -> str:
        """The database file being read."""
        return self._database.path

    def _query(self, fn: Callable[[apsw.Connection], T]) -> T:
        with _reading(self._database.path):
            return fn(self._conn)

    def _unless_unsupported(self, fn: Callable[[apsw.Connection], T]) -> T | None:
        """``fn``'s result, or None when this SQLite cannot run its statement (no JSON
        functions, no index to hint); every other driver error is raised as a zincir error."""
        with _reading(self._database.path):
            try:
                return fn(self._conn)
            except apsw.SQLError:
                return None

    def _rows(self, sql: str, params: Sequence[Any]) -> Callable[[apsw.Connection], list[Row]]:
        def read(conn: apsw.Connection) -> list[Row]:
            cursor = conn.cursor()
            cursor.row_trace = _as_dict
            return list(cursor.execute(sql, tuple(params)))

        return read

    def _event_columns(self) -> str:
        """The columns of an :class:`EventRow` and those its payload is composed from."""
        return event_columns(_EVENT_COLUMNS, self._tables)

    def _stored(self, columns: str) -> str:
        """``columns`` of ``operations`` and those its input and record are composed from."""
        return read_columns(columns, "content" in self._tables)

    def _dicts(self, sql: str, params: Sequence[Any], *, decode: bool = True) -> list[Row]:
        """Rows as dicts keyed by column name, JSON columns decoded unless ``decode`` is off."""
        found = self._query(self._rows(sql, params))
        found = compose_read_rows(found, self._query(reader))
        return decode_columns(found) if decode else found

    def _optional(self, table: str, sql: str, params: Sequence[Any]) -> list[Row]:
        """Rows of a table this database may not have (an older schema): empty if absent."""
        return self._dicts(sql, params) if table in self._tables else []

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
        filters = [
            ("status = ?", status),
            ("app_version = ?", app_version),
            (
                f"status IN ('pending', 'running') AND {updated_at_sql()} < ?",
                None if stuck_before is None else to_db(stuck_before),
            ),
        ]
        if app_version is not None and not self._has_column("agent_runs", "app_version"):
            return []  # an older schema: no run has a version
        wanted = [(sql, value) for sql, value in filters if value]
        where = "WHERE " + " AND ".join(sql for sql, _ in wanted) if wanted else ""
        return [
            _run_record(row)
            for row in self._dicts(
                f"{self._runs()} {where} ORDER BY zincir_updated_at DESC, id LIMIT ?",
                (*(value for _, value in wanted), row_limit(limit)),
                decode=False,
            )
        ]

    def _runs(self) -> str:
        """The SELECT of runs for this schema, found once per snapshot: with the lease's
        expiry where it keeps the lease's TTL (an older schema's writers kept it on the row)."""
        if self._runs_sql is None:
            leased = self._has_column("agent_runs", "lease_ttl_us")
            self._runs_sql = _runs_select(lease=leased)
        return self._runs_sql

    def _has_column(self, table: str, column: str) -> bool:
        """Whether ``table`` has ``column`` (an older schema may lack it)."""
        return bool(
            self._dicts("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", (table, column))
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""
        found = self._dicts(f"{self._runs()} WHERE id = ?", (run_id,), decode=False)
        return _run_record(found[0]) if found else None

    def children(self, run_id: str, limit: int = 500) -> list[RunRecord]:
        """The runs spawned by ``run_id``, oldest first."""
        return [
            _run_record(row)
            for row in self._dicts(
                f"{self._runs()} WHERE parent_id = ? ORDER BY created_at, id LIMIT ?",
                (run_id, row_limit(limit)),
                decode=False,
            )
        ]

    # -- the log --------------------------------------------------------------------------

    def events(self, run_id: str, after_seq: int = 0, limit: int = 200) -> list[EventRow]:
        """One page of the log after ``after_seq``: keyset on the (run_id, seq) primary key;
        events compaction archived are merged in by seq (one index probe when none are)."""
        params = (run_id, min(max(after_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        select = f"SELECT {self._event_columns()} FROM"
        live = cast(list[EventRow], self._dicts(f"{select} events {page}", params))
        if not self._archived_after(run_id, params[1]):
            return live
        older = cast(
            list[EventRow],
            self._dicts(f"{select} archived_events {page}", params),
        )
        return merge_by_seq(older, live, row_seq, params[2])

    def _archived_after(self, run_id: str, after_seq: int) -> bool:
        """Whether compaction archived any event of ``run_id`` after ``after_seq`` (False on
        a schema older than the archive)."""
        if "archived_events" not in self._tables:
            return False
        return bool(
            self._dicts(
                "SELECT 1 FROM archived_events WHERE run_id = ? AND seq > ? LIMIT 1",
                (run_id, after_seq),
            )
        )

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
        ids = sorted({run_id for run_id, _ in waiting})
        marks = ", ".join("?" for _ in ids)
        sql = (
            "SELECT DISTINCT to_run_id, topic FROM messages "
            f"WHERE received_at IS NULL AND to_run_id IN ({marks})"
        )
        found = self._query(lambda conn: {(str(a), str(b)) for a, b in conn.execute(sql, ids)})
        return {run_id for run_id, topic in found & waiting}

    def answered(self, run_id: str, call_ids: Sequence[str]) -> set[str]:
        """Which of these tool call ids already have a ``tool_result``."""
        if not call_ids:
            return set()
        marks = ", ".join("?" for _ in call_ids)
        # An archived intent was answered: compaction keeps the open ones live.
        queries = [
            f"SELECT tool_call_id FROM events WHERE run_id = ? AND type = 'tool_result' "
            f"AND tool_call_id IN ({marks})"
        ]
        if "archived_events" in self._tables:
            queries.append(
                "SELECT tool_call_id FROM archived_events WHERE run_id = ? AND type = 'tool_call' "
                f"AND tool_call_id IN ({marks})"
            )
        return self._query(
            lambda conn: {
                str(call_id)
                for query in queries
                for (call_id,) in conn.execute(query, (run_id, *call_ids))
            }
        )

    def tool_intents(self, run_id: str, call_ids: Sequence[str]) -> list[EventRow]:
        """The ``tool_call`` events (intents) of these call ids, by seq: one lookup each in
        the ``events_one_intent`` index, never a scan of the log."""
        found: list[EventRow] = []
        ids = list(dict.fromkeys(call_ids))
        for start in range(0, len(ids), _MAX_KEYS):
            chunk = ids[start : start + _MAX_KEYS]
            marks = ", ".join("?" for _ in chunk)
            found += cast(
                list[EventRow],
                self._dicts(
                    f"SELECT {self._event_columns()} FROM events WHERE run_id = ? "
                    f"AND type = 'tool_call' AND tool_call_id IN ({marks})",
                    (run_id, *chunk),
                ),
            )
        return sorted(found, key=lambda row: row["seq"])

    def result_seqs(self, run_id: str, call_ids: Sequence[str]) -> dict[str, int]:
        """The seq of the ``tool_result`` of each of these call ids that has one (indexed)."""
        found: dict[str, int] = {}
        ids = list(dict.fromkeys(call_ids))
        for start in range(0, len(ids), _MAX_KEYS):
            chunk = ids[start : start + _MAX_KEYS]
            marks = ", ".join("?" for _ in chunk)
            rows = self._query(
                self._rows(
                    "SELECT tool_call_id, seq FROM events WHERE run_id = ? "
                    f"AND type = 'tool_result' AND tool_call_id IN ({marks})",
                    (run_id, *chunk),
                )
            )
            found.update({str(row["tool_call_id"]): int(row["seq"]) for row in rows})
        return found

    def pending_tools(self, run_id: str, limit: int = 500) -> list[PendingToolRow]:
        """Tool intents without a result (in doubt after a crash), oldest first."""
        columns = "intent.seq, intent.payload, intent.created_at, intent.tool_call_id"
        if "open_intents" in self._tables:  # O(pending), not O(intents)
            return cast(
                list[PendingToolRow],
                self._dicts(
                    f"SELECT {columns} FROM open_intents AS open JOIN events AS intent "
                    "ON intent.run_id = open.run_id AND intent.seq = open.seq "
                    "WHERE open.run_id = ? ORDER BY open.seq LIMIT ?",
                    (run_id, row_limit(limit)),
                ),
            )
        sql = (
            f"SELECT {columns} FROM events AS intent {{hint}} WHERE intent.run_id = ? "
            "AND intent.type = 'tool_call' AND NOT EXISTS (SELECT 1 FROM events AS outcome "
            "WHERE outcome.run_id = intent.run_id AND outcome.type = 'tool_result' "
            "AND outcome.tool_call_id = intent.tool_call_id) ORDER BY intent.seq LIMIT ?"
        )
        params = (run_id, row_limit(limit))
        # the partial index of intents: O(intents), not O(events), on a long run
        hinted = self._unless_unsupported(
            self._rows(sql.format(hint="INDEXED BY events_one_intent"), params)
        )
        found = (
            hinted if hinted is not None else self._query(self._rows(sql.format(hint=""), params))
        )
        for row in found:
            row["payload"] = decode_json(row["payload"])
        return cast(list[PendingToolRow], found)

    def usage(self, run: RunRecord) -> Usage:
        """Totals of the numeric ``usage`` fields of the run's ``llm_call`` events.

        The log is append-only, so totals are cached per run (by id and creation time) and
        only events newer than the cached ones are summed.
        """
        return self._database.usage_cache.usage(run, self._usage_sums)

    def _usage_sums(self, run_id: str, upto: int, last_seq: int) -> list[tuple[Any, ...]] | None:
        """(field, sum) over the usage objects of ``llm_call`` events in (upto, last_seq];
        None on an SQLite without the JSON functions."""
        return self._unless_unsupported(
            lambda conn: conn.execute(
                f"SELECT usage.key, SUM(usage.value) FROM {self._log_source()} AS e, "
                "json_each(e.payload, '$.usage') AS usage WHERE e.run_id = ? AND e.seq > ? "
                "AND e.seq <= ? AND e.type = 'llm_call' AND json_valid(e.payload) "
                "AND json_type(e.payload, '$.usage') = 'object' "
                "AND usage.type IN ('integer', 'real') GROUP BY usage.key",
                (run_id, upto, last_seq),
            ).fetchall()
        )

    # -- durable state --------------------------------------------------------------------

    def checkpoints(self, run_id: str, limit: int = 500) -> list[CheckpointRow]:
        """The run's semantic checkpoints by round."""
        return cast(
            list[CheckpointRow],
            self._optional(
                "checkpoints",
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? "
                "ORDER BY round LIMIT ?",
                (run_id, row_limit(limit)),
            ),
        )

    def restart_checkpoints(self, run_id: str, limit: int = 500) -> list[RestartCheckpointRow]:
        """The run's restart checkpoints by id, each payload cut to its first 200 characters."""
        if "restart_checkpoints" not in self._tables:
            return []
        return cast(
            list[RestartCheckpointRow],
            self._dicts(
                "SELECT checkpoint_id, revision, length(CAST(payload AS BLOB)) AS size, "
                "substr(payload, 1, 200) AS preview, updated_at FROM restart_checkpoints "
                "WHERE run_id = ? ORDER BY checkpoint_id LIMIT ?",
                (run_id, row_limit(limit)),
                decode=False,
            ),
        )

    def operations(self, run_id: str, limit: int = 500) -> list[OperationRow]:
        """The run's durable operations, oldest first."""
        return cast(
            list[OperationRow],
            self._optional(
                "operations",
                f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = ? "
                "ORDER BY created_at, step_id, sequence LIMIT ?",
                (run_id, row_limit(limit)),
            ),
        )

    def operation_outcomes(
        self, run_id: str, keys: Sequence[tuple[str, int]]
    ) -> list[OperationOutcomeRow]:
        """The state and record of these operations, by primary key (step id, sequence),
        in the order asked; keys with no operation are left out. Inputs are not read."""
        if "operations" not in self._tables:
            return []
        wanted = outcome_keys(keys)
        found: list[Row] = []
        for start in range(0, len(wanted), _MAX_KEYS):  # one query per batch of keys
            found += self._dicts(
                f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations WHERE run_id = ? "
                "AND (step_id, sequence) IN "
                "(SELECT value ->> 0, value ->> 1 FROM json_each(?))",
                (run_id, json.dumps(wanted[start : start + _MAX_KEYS])),
            )
        return outcomes_in_order(wanted, found)

    def first_model_request(self, run_id: str, step_id: str | None = None) -> OperationRow | None:
        """The run's first model request (``model_request`` or ``model_stream`` #0), input
        included: a primary-key lookup when ``step_id`` is known, else a pass over the
        run's operations that reads only the leading columns of the ones it skips."""
        where, params = ("AND step_id = ? ", (step_id,)) if step_id is not None else ("", ())
        found = self._optional(
            "operations",
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = ? {where}"
            f"AND sequence = 0 AND kind IN {_MODEL_KINDS} ORDER BY created_at, step_id LIMIT 1",
            (run_id, *params),
        )
        return cast(OperationRow, found[0]) if found else None

    def steps(self, run_id: str, limit: int = 500) -> list[StepRow]:
        """The run's workflow steps, in the order they started."""
        return cast(
            list[StepRow],
            self._optional(
                "steps",
                f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? "
                "ORDER BY started_at, name LIMIT ?",
                (run_id, row_limit(limit)),
            ),
        )

    def timers(self, run_id: str, limit: int = 500) -> list[TimerRow]:
        """The run's workflow timers by wake time."""
        return cast(
            list[TimerRow],
            self._optional(
                "timers",
                f"SELECT {_TIMER_COLUMNS} FROM timers WHERE run_id = ? "
                "ORDER BY wake_at, name LIMIT ?",
                (run_id, row_limit(limit)),
            ),
        )

    def messages(self, run_id: str, limit: int = 500) -> list[MessageRow]:
        """Messages sent to or from the run, oldest first."""
        return cast(
            list[MessageRow],
            self._optional(
                "messages",
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? OR from_run_id = ? "
                "ORDER BY id LIMIT ?",
                (run_id, run_id, row_limit(limit)),
            ),
        )

    # -- bounded reads of a long run (the inspector's pages) ------------------------------

    def events_before(self, run_id: str, before_seq: int, limit: int = 200) -> list[EventRow]:
        """The last ``limit`` events before ``before_seq``, in seq order: keyset on the
        (run_id, seq) primary key read backwards, archived events merged in."""
        params = (run_id, min(max(before_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
        live = cast(
            list[EventRow],
            self._dicts(f"SELECT {self._event_columns()} FROM events {page}", params),
        )
        older = cast(
            list[EventRow],
            self._optional(
                "archived_events",
                f"SELECT {self._event_columns()} FROM archived_events {page}",
                params,
            ),
        )
        return tail_by_seq(older, live, params[2])

    def operation_page(
        self, run_id: str, offset: int = 0, limit: int = 50
    ) -> list[OperationSummaryRow]:
        """One page of the run's operations, newest first, without inputs or records."""
        return cast(
            list[OperationSummaryRow],
            self._optional(
                "operations",
                f"SELECT {_SUMMARY_COLUMNS} FROM operations WHERE run_id = ? "
                "ORDER BY created_at DESC, step_id DESC, sequence DESC LIMIT ? OFFSET ?",
                (run_id, row_limit(limit), row_limit(offset)),
            ),
        )

    def failed_operations(
        self, run_id: str, kind: str, limit: int = 500
    ) -> list[OperationOutcomeRow]:
        """The run's operations of ``kind`` whose record is a failure, newest first, records
        included (inputs not read)."""
        return cast(
            list[OperationOutcomeRow],
            self._optional(
                "operations",
                f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations "
                f"WHERE run_id = ? AND kind = ? "
                "AND outcome = 'failure' ORDER BY created_at DESC, step_id DESC, "
                "sequence DESC LIMIT ?",
                (run_id, kind, row_limit(limit)),
            ),
        )

    def operation(self, run_id: str, step_id: str, sequence: int) -> OperationRow | None:
        """One operation, input and record whole, by its primary key."""
        found = self._optional(
            "operations",
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations "
            f"WHERE run_id = ? AND step_id = ? "
            "AND sequence = ?",
            (run_id, step_id, row_limit(sequence)),
        )
        return cast(OperationRow, found[0]) if found else None
