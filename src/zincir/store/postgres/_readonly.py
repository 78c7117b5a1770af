"""A read-only view of a zincir PostgreSQL schema (the inspector, ``zincir runs``).

It never creates, migrates or writes the schema: each :meth:`ReadOnlyPostgres.snapshot`
opens one short connection whose sessions default to read-only transactions
(``default_transaction_read_only``), runs one ``REPEATABLE READ READ ONLY`` transaction,
checks that the schema is a zincir schema this code can read, and closes. The named queries
return the typed rows every backend's view returns (``zincir.store._readonly_rows``):
timestamps as UTC text, JSON columns decoded (text that is not strict JSON is kept as it is).
The LangGraph thread queries live in ``_readonly_threads``. Driver errors leave as zincir
errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any, Final, cast

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from ..._errors import ConnectionLost, NotAZincirDatabase, SchemaTooNew, StoreError
from ..._validate import MAX_SEQUENCE
from .._content import compose_read_rows, event_columns, read_columns
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
from ._base import Conn, migrations, split_schema
from ._content import reader
from ._errors import DRIVER_ERRORS, translate
from ._log import text_time
from ._readonly_threads import ThreadReads

__all__ = ["PostgresSnapshot", "ReadOnlyPostgres"]

_C: Final = ' COLLATE "C"'  # text orders byte by byte, as SQLite's do
_EVENT_COLUMNS: Final = select_list(EventRow)
_CHECKPOINT_COLUMNS: Final = select_list(CheckpointRow)
_OPERATION_COLUMNS: Final = select_list(OperationRow)
_OUTCOME_COLUMNS: Final = select_list(OperationOutcomeRow)
_SUMMARY_COLUMNS: Final = select_list(OperationSummaryRow)
_STEP_COLUMNS: Final = select_list(StepRow)
_TIMER_COLUMNS: Final = select_list(TimerRow)
_MESSAGE_COLUMNS: Final = select_list(MessageRow)
_MODEL_KINDS: Final = "('model_request', 'model_stream')"
_INTEGER = r"^-?[0-9]+$"  # a JSON number SQLite's json_each calls an integer
_USAGE_SQL: Final = (
    "SELECT u.key, sum((u.value #>> '{}')::numeric), "
    f"bool_and((u.value #>> '{{}}') ~ '{_INTEGER}') "
    "FROM {source} AS e CROSS JOIN LATERAL (SELECT e.payload::json -> 'usage' AS usage) AS p "
    "CROSS JOIN LATERAL json_each(CASE WHEN json_typeof(p.usage) = 'object' THEN p.usage "
    "ELSE '{}'::json END) AS u WHERE e.run_id = %s AND e.seq > %s AND e.seq <= %s "
    "AND e.type = 'llm_call' AND json_typeof(u.value) = 'number' GROUP BY u.key"
)


@contextmanager
def reading(where: str) -> Iterator[None]:
    """The driver-error boundary of a read: a broken connection lost nothing (nothing is
    written here); every other driver error as the store's writes translate it."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        if isinstance(error, errors.QueryCanceled | errors.LockNotAvailable):
            raise translate(error, where) from None
        raise ConnectionLost(
            f"the connection to {where} broke ({str(error).strip() or type(error).__name__}); "
            "nothing was written (this view only reads): try again once the server is back"
        ) from None
    except errors.InsufficientPrivilege as error:
        raise StoreError(f"this role may not read {where} ({error})") from None
    except DRIVER_ERRORS as error:
        raise translate(error, where) from None


def _text_times(row: Row) -> Row:
    """A row with its timestamptz values as the UTC text the SQLite view returns."""
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = text_time(value)
    return row


def _number(total: Decimal, integral: bool) -> int | float:
    """A sum as SQLite's SUM returns it: an int for integers only, else a float."""
    return int(total) if integral else float(total)


class ReadOnlyPostgres:
    """A zincir PostgreSQL schema opened read-only: one short connection per snapshot."""

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        self._conninfo, self.schema, self.path = split_schema(url)
        self.known_version = migrations()[-1][0]
        params = conninfo_to_dict(self._conninfo)  # the URL's own options are kept
        self._options = (
            f"{params.get('options') or ''} -c search_path={self.schema} -c TimeZone=UTC "
            "-c default_transaction_read_only=on"
        ).strip()
        self._application = str(params.get("application_name") or "zincir-readonly")
        self._timeout = max(1, int(connect_timeout))
        self.usage_cache = UsageCache()

    def _connect(self) -> Conn:
        try:
            conn: Conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                options=self._options,
                connect_timeout=self._timeout,
                application_name=self._application,
            )
        except psycopg.OperationalError as error:
            raise ConnectionLost(
                f"cannot connect to {self.path} ({str(error).strip()}); is the server up and "
                "the URL right? Nothing was read"
            ) from None
        except DRIVER_ERRORS as error:
            raise translate(error, self.path) from None
        return conn

    def _tables(self, conn: Conn) -> frozenset[str]:
        """The schema's tables, after refusing a schema that is not a readable zincir one."""
        tables = frozenset(
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "UNION ALL SELECT table_name || '.' || column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'events' AND column_name = %s",
                (self.schema, self.schema, "payload_pieces"),
            )
        )
        if not tables:
            raise NotAZincirDatabase(
                f"{self.path} holds no zincir tables (schema {self.schema!r} is empty or "
                "missing); run `zincir migrate --db URL` or your application first, or name "
                "the schema with ?schema=NAME (reading never creates a schema)"
            )
        if not REQUIRED_TABLES <= tables:
            raise NotAZincirDatabase(
                f"schema {self.schema!r} of {self.path} holds another application's tables "
                f"({', '.join(sorted(tables)[:5])}), not zincir's; name zincir's schema with "
                "?schema=NAME"
            )
        (newest,) = conn.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
        ).fetchone() or (0,)
        if int(newest) > self.known_version:
            raise SchemaTooNew(
                f"{self.path} has schema version {newest}, newer than this zincir's "
                f"{self.known_version}; upgrade zincir"
            )
        return tables

    def schema_version(self) -> int:
        """The newest migration applied to the schema (after the checks of a snapshot)."""
        with self.snapshot() as reader:
            (newest,) = reader._tuples("SELECT coalesce(max(version), 0) FROM schema_migrations")[0]
        return int(newest)

    def check(self) -> None:
        """Raise unless the schema is a zincir schema this code can read (NotAZincirDatabase,
        SchemaTooNew, ConnectionLost, ...)."""
        with self.snapshot():
            pass

    @contextmanager
    def snapshot(self) -> Iterator[PostgresSnapshot]:
        """A :class:`PostgresSnapshot` over one repeatable-read, read-only transaction,
        rolled back (by closing its connection) when the block ends."""
        conn = self._connect()
        try:
            with reading(self.path):
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                tables = self._tables(conn)
            yield PostgresSnapshot(conn, self, tables)
        finally:
            conn.close()


class PostgresSnapshot(ThreadReads):
    """The named read queries, inside one read transaction of a :class:`ReadOnlyPostgres`."""

    def __init__(self, conn: Conn, database: ReadOnlyPostgres, tables: frozenset[str]) -> None:
        self._conn = conn
        self._database = database
        self._tables = tables

    @property
    def path(self) -> str:
        """The schema being read, as a URL without its password."""
        return self._database.path

    def _tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with reading(self._database.path):
            return self._conn.execute(sql, tuple(params)).fetchall()

    def _event_columns(self) -> str:
        """The columns of an :class:`EventRow` and those its payload is composed from."""
        return event_columns(_EVENT_COLUMNS, self._tables)

    def _stored(self, columns: str) -> str:
        """``columns`` of ``operations`` and those its input and record are composed from."""
        return read_columns(columns, "content" in self._tables)

    def _dicts(self, sql: str, params: Sequence[Any], *, decode: bool = True) -> list[Row]:
        """Rows as dicts keyed by column name, times as text, JSON columns decoded unless
        ``decode`` is off."""
        with reading(self._database.path), self._conn.cursor(row_factory=dict_row) as cursor:
            found = [_text_times(row) for row in cursor.execute(sql, tuple(params)).fetchall()]
            found = compose_read_rows(found, reader(self._conn))
        return decode_columns(found) if decode else found

    def _runs(self, where: str, params: Sequence[Any]) -> list[RunRecord]:
        """Runs as RunRecords; a column an older schema lacks (``app_version``) reads as unset."""
        return [
            cast(RunRecord, {name: row.get(name) for name in RUN_COLUMNS})
            for row in self._dicts(f"SELECT * FROM agent_runs {where}", params, decode=False)
        ]

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
        if app_version is not None and not self._tuples(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'agent_runs' AND column_name = 'app_version'",
            (self._database.schema,),
        ):
            return []  # an older schema: no run has a version
        filters: list[tuple[str, object]] = [
            ("status = %s", status),
            ("app_version = %s", app_version),
            ("status IN ('pending', 'running') AND updated_at < %s", stuck_before),
        ]
        wanted = [(sql, value) for sql, value in filters if value]
        where = "WHERE " + " AND ".join(sql for sql, _ in wanted) if wanted else ""
        return self._runs(
            f"{where} ORDER BY updated_at DESC, id{_C} LIMIT %s",
            (*(value for _, value in wanted), row_limit(limit)),
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        """One run, or None."""
        found = self._runs("WHERE id = %s", (run_id,))
        return found[0] if found else None

    def children(self, run_id: str, limit: int = 500) -> list[RunRecord]:
        """The runs spawned by ``run_id``, oldest first."""
        return self._runs(
            f"WHERE parent_id = %s ORDER BY created_at, id{_C} LIMIT %s",
            (run_id, row_limit(limit)),
        )

    # -- the log --------------------------------------------------------------------------

    def events(self, run_id: str, after_seq: int = 0, limit: int = 200) -> list[EventRow]:
        """One page of the log after ``after_seq``: keyset on the (run_id, seq) primary key;
        events compaction archived are merged in by seq (one index probe when none are)."""
        params = (run_id, min(max(after_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s"
        select = f"SELECT {self._event_columns()} FROM"
        live = cast(list[EventRow], self._dicts(f"{select} events {page}", params))
        if not self._archived_after(run_id, params[1]):
            return live
        older = cast(list[EventRow], self._dicts(f"{select} archived_events {page}", params))
        return merge_by_seq(older, live, row_seq, params[2])

    def _archived_after(self, run_id: str, after_seq: int) -> bool:
        """Whether compaction archived any event of ``run_id`` after ``after_seq`` (False on
        a schema older than the archive)."""
        if "archived_events" not in self._tables:
            return False
        return bool(
            self._tuples(
                "SELECT 1 FROM archived_events WHERE run_id = %s AND seq > %s LIMIT 1",
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
        if not waiting:
            return set()
        found = self._tuples(
            "SELECT DISTINCT to_run_id, topic FROM messages "
            "WHERE received_at IS NULL AND to_run_id = ANY(%s)",
            (sorted({run_id for run_id, _ in waiting}),),
        )
        return {run_id for run_id, topic in {(str(a), str(b)) for a, b in found} & waiting}

    def answered(self, run_id: str, call_ids: Sequence[str]) -> set[str]:
        """Which of these tool call ids already have a ``tool_result``."""
        if not call_ids:
            return set()
        # An archived intent was answered: compaction keeps the open ones live.
        queries = [
            "SELECT tool_call_id FROM events WHERE run_id = %s AND type = 'tool_result' "
            "AND tool_call_id = ANY(%s)"
        ]
        if "archived_events" in self._tables:
            queries.append(
                "SELECT tool_call_id FROM archived_events WHERE run_id = %s "
                "AND type = 'tool_call' AND tool_call_id = ANY(%s)"
            )
        return {
            str(call_id)
            for query in queries
            for (call_id,) in self._tuples(query, (run_id, list(call_ids)))
        }

    def tool_intents(self, run_id: str, call_ids: Sequence[str]) -> list[EventRow]:
        """The ``tool_call`` events (intents) of these call ids, by seq (the
        ``events_one_intent`` index, never a scan of the log)."""
        if not call_ids:
            return []
        return cast(
            list[EventRow],
            self._dicts(
                f"SELECT {self._event_columns()} FROM events WHERE run_id = %s "
                "AND type = 'tool_call' AND tool_call_id = ANY(%s) ORDER BY seq",
                (run_id, list(dict.fromkeys(call_ids))),
            ),
        )

    def result_seqs(self, run_id: str, call_ids: Sequence[str]) -> dict[str, int]:
        """The seq of the ``tool_result`` of each of these call ids that has one (indexed)."""
        if not call_ids:
            return {}
        return {
            str(call_id): int(seq)
            for call_id, seq in self._tuples(
                "SELECT tool_call_id, seq FROM events WHERE run_id = %s "
                "AND type = 'tool_result' AND tool_call_id = ANY(%s)",
                (run_id, list(dict.fromkeys(call_ids))),
            )
        }

    def pending_tools(self, run_id: str, limit: int = 500) -> list[PendingToolRow]:
        """Tool intents without a result (in doubt after a crash), oldest first: the
        ``open_intents`` table, O(pending) not O(intents)."""
        return cast(
            list[PendingToolRow],
            self._dicts(
                "SELECT intent.seq, intent.payload, intent.created_at, intent.tool_call_id "
                "FROM open_intents AS open JOIN events AS intent "
                "ON intent.run_id = open.run_id AND intent.seq = open.seq "
                "WHERE open.run_id = %s ORDER BY open.seq LIMIT %s",
                (run_id, row_limit(limit)),
            ),
        )

    def usage(self, run: RunRecord) -> Usage:
        """Totals of the numeric ``usage`` fields of the run's ``llm_call`` events.

        The log is append-only, so totals are cached per run (by id and creation time) and
        only events newer than the cached ones are summed.
        """

        def sums(run_id: str, upto: int, last_seq: int) -> list[tuple[str, int | float]]:
            return [
                (name, _number(total, integral))
                for name, total, integral in self._usage_rows(run_id, upto, last_seq)
            ]

        return self._database.usage_cache.usage(run, sums)

    def _usage_rows(self, run_id: str, upto: int, last_seq: int) -> list[tuple[str, Any, bool]]:
        """(field, sum, all integers) over the usage objects of ``llm_call`` events in
        (upto, last_seq]; an event whose payload is not JSON is skipped, as SQLite's
        ``json_valid`` skips it (the statement is retried in Python after a savepoint)."""
        with reading(self._database.path):
            try:
                query = _USAGE_SQL.replace("{source}", self._log_source())
                with self._conn.transaction():  # a savepoint: a cast error leaves it alone
                    found = self._conn.execute(query, (run_id, upto, last_seq)).fetchall()
                return [(str(name), total, bool(integral)) for name, total, integral in found]
            except errors.InvalidTextRepresentation:
                pass
        sums: dict[str, tuple[Decimal, bool]] = {}
        for (payload,) in self._tuples(
            f"SELECT payload FROM {self._log_source()} AS e WHERE run_id = %s AND seq > %s "
            "AND seq <= %s AND type = 'llm_call'",
            (run_id, upto, last_seq),
        ):
            document = decode_json(payload)
            usage = document.get("usage") if isinstance(document, Mapping) else None
            if not isinstance(usage, Mapping):
                continue
            for name, value in usage.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    total, integral = sums.get(str(name), (Decimal(0), True))
                    sums[str(name)] = (total + Decimal(value), integral and isinstance(value, int))
        return [(name, total, integral) for name, (total, integral) in sums.items()]

    # -- durable state --------------------------------------------------------------------

    def checkpoints(self, run_id: str, limit: int = 500) -> list[CheckpointRow]:
        """The run's semantic checkpoints by round."""
        return cast(
            list[CheckpointRow],
            self._dicts(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s "
                "ORDER BY round LIMIT %s",
                (run_id, row_limit(limit)),
            ),
        )

    def restart_checkpoints(self, run_id: str, limit: int = 500) -> list[RestartCheckpointRow]:
        """The run's restart checkpoints by id, each payload cut to its first 200 characters."""
        return cast(
            list[RestartCheckpointRow],
            self._dicts(
                "SELECT checkpoint_id, revision, octet_length(payload) AS size, "
                "substr(payload, 1, 200) AS preview, updated_at FROM restart_checkpoints "
                f"WHERE run_id = %s ORDER BY checkpoint_id{_C} LIMIT %s",
                (run_id, row_limit(limit)),
                decode=False,
            ),
        )

    def operations(self, run_id: str, limit: int = 500) -> list[OperationRow]:
        """The run's durable operations, oldest first."""
        return cast(
            list[OperationRow],
            self._dicts(
                f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = %s "
                f"ORDER BY created_at, step_id{_C}, sequence LIMIT %s",
                (run_id, row_limit(limit)),
            ),
        )

    def operation_outcomes(
        self, run_id: str, keys: Sequence[tuple[str, int]]
    ) -> list[OperationOutcomeRow]:
        """The state and record of these operations, by primary key (step id, sequence),
        in the order asked; keys with no operation are left out. Inputs are not read."""
        wanted = outcome_keys(keys)
        if not wanted:
            return []
        found = self._dicts(
            f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations WHERE run_id = %s "
            "AND (step_id, sequence) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))",
            (run_id, [step for step, _ in wanted], [seq for _, seq in wanted]),
        )
        return outcomes_in_order(wanted, found)

    def first_model_request(self, run_id: str, step_id: str | None = None) -> OperationRow | None:
        """The run's first model request (``model_request`` or ``model_stream`` #0), input
        included: a primary-key lookup when ``step_id`` is known."""
        where, params = ("AND step_id = %s ", (step_id,)) if step_id is not None else ("", ())
        found = self._dicts(
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations WHERE run_id = %s {where}"
            f"AND sequence = 0 AND kind IN {_MODEL_KINDS} ORDER BY created_at, step_id{_C} "
            "LIMIT 1",
            (run_id, *params),
        )
        return cast(OperationRow, found[0]) if found else None

    def steps(self, run_id: str, limit: int = 500) -> list[StepRow]:
        """The run's workflow steps, in the order they started."""
        return cast(
            list[StepRow],
            self._dicts(
                f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = %s "
                f"ORDER BY started_at, name{_C} LIMIT %s",
                (run_id, row_limit(limit)),
            ),
        )

    def timers(self, run_id: str, limit: int = 500) -> list[TimerRow]:
        """The run's workflow timers by wake time."""
        return cast(
            list[TimerRow],
            self._dicts(
                f"SELECT {_TIMER_COLUMNS} FROM timers WHERE run_id = %s "
                f"ORDER BY wake_at, name{_C} LIMIT %s",
                (run_id, row_limit(limit)),
            ),
        )

    def messages(self, run_id: str, limit: int = 500) -> list[MessageRow]:
        """Messages sent to or from the run, oldest first."""
        return cast(
            list[MessageRow],
            self._dicts(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages "
                "WHERE to_run_id = %s OR from_run_id = %s ORDER BY id LIMIT %s",
                (run_id, run_id, row_limit(limit)),
            ),
        )

    # -- bounded reads of a long run (the inspector's pages) ------------------------------

    def events_before(self, run_id: str, before_seq: int, limit: int = 200) -> list[EventRow]:
        """The last ``limit`` events before ``before_seq``, in seq order: keyset on the
        (run_id, seq) primary key read backwards, archived events merged in."""
        params = (run_id, min(max(before_seq, 0), MAX_SEQUENCE), row_limit(limit))
        page = "WHERE run_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s"
        select = f"SELECT {self._event_columns()} FROM"
        live = cast(list[EventRow], self._dicts(f"{select} events {page}", params))
        older: list[EventRow] = []
        if "archived_events" in self._tables:
            older = cast(list[EventRow], self._dicts(f"{select} archived_events {page}", params))
        return tail_by_seq(older, live, params[2])

    def operation_page(
        self, run_id: str, offset: int = 0, limit: int = 50
    ) -> list[OperationSummaryRow]:
        """One page of the run's operations, newest first, without inputs or records."""
        return cast(
            list[OperationSummaryRow],
            self._dicts(
                f"SELECT {_SUMMARY_COLUMNS} FROM operations WHERE run_id = %s "
                f"ORDER BY created_at DESC, step_id{_C} DESC, sequence DESC LIMIT %s OFFSET %s",
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
            self._dicts(
                f"SELECT {self._stored(_OUTCOME_COLUMNS)} FROM operations "
                f"WHERE run_id = %s AND kind = %s "
                f"AND outcome = 'failure' ORDER BY created_at DESC, step_id{_C} DESC, "
                "sequence DESC LIMIT %s",
                (run_id, kind, row_limit(limit)),
            ),
        )

    def operation(self, run_id: str, step_id: str, sequence: int) -> OperationRow | None:
        """One operation, input and record whole, by its primary key."""
        found = self._dicts(
            f"SELECT {self._stored(_OPERATION_COLUMNS)} FROM operations "
            f"WHERE run_id = %s AND step_id = %s "
            "AND sequence = %s",
            (run_id, step_id, row_limit(sequence)),
        )
        return cast(OperationRow, found[0]) if found else None
