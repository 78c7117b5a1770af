"""Read-only access to a zincir SQLite database: never creates, migrates or writes it.

Each request opens ``file:PATH?mode=ro`` (``SQLITE_OPEN_READONLY``, ``query_only``), reads in
one snapshot and closes. Rows are read as dicts by column name, so columns added by later
migrations are tolerated and a missing optional table reads as empty.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import apsw

from .._errors import NotAZincirDatabase, SchemaTooNew, StoreError
from ..store import migrations

__all__ = ["EVENT_PAGE_SIZE", "LIST_LIMIT", "ROW_LIMIT", "InspectorDatabase", "Reader"]

EVENT_PAGE_SIZE = 200
LIST_LIMIT = 100
ROW_LIMIT = 500  # operations, steps, timers, checkpoints, children and messages per run page

Row = dict[str, Any]
JSON_COLUMNS = {
    "config", "result", "payload", "state", "evidence", "record", "input_json",
}


def parse_json(text: Any) -> Any:
    """Stored JSON text as a value; text that is not JSON is returned as it is."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _as_dict(cursor: apsw.Cursor, row: tuple[Any, ...]) -> Row:
    return {column[0]: value for column, value in zip(cursor.getdescription(), row, strict=True)}


def _missing_table(error: apsw.Error) -> bool:
    return isinstance(error, apsw.SQLError) and "no such" in str(error)


class InspectorDatabase:
    """A zincir SQLite file opened read-only, one short connection per request."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.known_version = migrations()[-1][0]
        self._usage_cache: dict[tuple[str, str], tuple[int, dict[str, int | float]]] = {}
        self._usage_lock = threading.Lock()

    def _connect(self) -> apsw.Connection:
        if not os.path.isfile(self.path):
            raise NotAZincirDatabase(
                f"there is no database at {self.path}; run `zincir demo` or your application "
                "to create one, or pass --db PATH (the inspector never creates a database)"
            )
        uri = "file:" + quote(self.path) + "?mode=ro"
        try:
            conn = apsw.Connection(
                uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
            )
            conn.setbusytimeout(5000)
            conn.execute("PRAGMA query_only=1")
        except apsw.Error as error:
            raise StoreError(f"cannot open {self.path} read-only: {error}") from None
        return conn

    def _check_schema(self, conn: apsw.Connection) -> None:
        try:
            tables = {
                name for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
        except apsw.NotADBError:
            raise NotAZincirDatabase(
                f"{self.path} is not an SQLite database; point --db at a zincir database "
                "(run `zincir demo` or your application to create one)"
            ) from None
        if not {"schema_migrations", "agent_runs", "events"} <= tables:
            raise NotAZincirDatabase(
                f"{self.path} holds no zincir schema; run `zincir demo` or your application "
                "(which migrates it with `zincir migrate`) first, or pass --db PATH"
            )
        newest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchall()[0][0]
        if isinstance(newest, int) and newest > self.known_version:
            raise SchemaTooNew(
                f"{self.path} has schema version {newest}, newer than this zincir's "
                f"{self.known_version}; upgrade zincir (pip install -U \"zincir[ui]\") to "
                "inspect it"
            )

    def check(self) -> None:
        """Raise NotAZincirDatabase or SchemaTooNew unless the file is a readable zincir db."""
        with self.snapshot():
            pass

    @contextmanager
    def snapshot(self) -> Iterator[Reader]:
        """A :class:`Reader` over one consistent read transaction."""
        conn = self._connect()
        try:
            try:
                conn.execute("BEGIN")
                self._check_schema(conn)
                yield Reader(conn, self)
            finally:
                if not conn.getautocommit():
                    conn.execute("COMMIT")
        except apsw.Error as error:
            raise StoreError(f"cannot read {self.path}: {error}") from None
        finally:
            conn.close()

    def cached_usage(self, key: tuple[str, str]) -> tuple[int, dict[str, int | float]]:
        with self._usage_lock:
            return self._usage_cache.get(key, (0, {}))

    def store_usage(self, key: tuple[str, str], upto: int, totals: dict[str, int | float]) -> None:
        with self._usage_lock:
            if len(self._usage_cache) > 1000:
                self._usage_cache.clear()
            self._usage_cache[key] = (upto, totals)


class Reader:
    """The inspector's queries, inside one read transaction."""

    def __init__(self, conn: apsw.Connection, database: InspectorDatabase) -> None:
        self.conn = conn
        self.database = database

    def rows(self, sql: str, params: tuple[Any, ...] = (), *, optional: bool = False) -> list[Row]:
        """Rows as dicts keyed by column name, JSON columns parsed."""
        cursor = self.conn.cursor()
        cursor.row_trace = _as_dict
        try:
            found: list[Row] = list(cursor.execute(sql, params))
        except apsw.SQLError as error:
            if optional and _missing_table(error):
                return []
            raise
        for row in found:
            for column in JSON_COLUMNS & row.keys():
                row[column] = parse_json(row[column])
        return found

    # -- runs -----------------------------------------------------------------------------

    def list_runs(self, status: str | None = None, limit: int = LIST_LIMIT) -> list[Row]:
        """The latest runs by update time, optionally of one status."""
        where, params = ("WHERE status = ?", (status,)) if status else ("", ())
        return self.rows(
            f"SELECT * FROM agent_runs {where} ORDER BY updated_at DESC, id LIMIT ?",
            (*params, limit),
        )

    def get_run(self, run_id: str) -> Row | None:
        found = self.rows("SELECT * FROM agent_runs WHERE id = ?", (run_id,))
        return found[0] if found else None

    def children(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        return self.rows(
            "SELECT * FROM agent_runs WHERE parent_id = ? ORDER BY created_at, id LIMIT ?",
            (run_id, limit),
        )

    # -- events ---------------------------------------------------------------------------

    def events(self, run_id: str, after_seq: int, limit: int = EVENT_PAGE_SIZE) -> list[Row]:
        """One page of the log: keyset on the (run_id, seq) primary key."""
        return self.rows(
            "SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after_seq, limit),
        )

    def answered(self, run_id: str, call_ids: list[str]) -> set[str]:
        """Which of these tool call ids already have a ``tool_result``."""
        if not call_ids:
            return set()
        marks = ", ".join("?" for _ in call_ids)
        return {
            str(call_id) for (call_id,) in self.conn.execute(
                "SELECT tool_call_id FROM events WHERE run_id = ? AND type = 'tool_result' "
                f"AND tool_call_id IN ({marks})",
                (run_id, *call_ids),
            )
        }

    def pending_tools(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        """Tool intents without a result (in doubt after a crash), oldest first."""
        try:  # schema 4 keeps the open intents apart: O(pending), not O(intents)
            return self.rows(
                "SELECT intent.seq, intent.payload, intent.created_at, intent.tool_call_id "
                "FROM open_intents AS open JOIN events AS intent ON intent.run_id = open.run_id "
                "AND intent.seq = open.seq WHERE open.run_id = ? ORDER BY open.seq LIMIT ?",
                (run_id, limit),
            )
        except apsw.SQLError:
            pass
        sql = (
            "SELECT intent.seq, intent.payload, intent.created_at, intent.tool_call_id "
            "FROM events AS intent {hint} WHERE intent.run_id = ? AND intent.type = 'tool_call' "
            "AND NOT EXISTS (SELECT 1 FROM events AS outcome WHERE outcome.run_id = "
            "intent.run_id AND outcome.type = 'tool_result' "
            "AND outcome.tool_call_id = intent.tool_call_id) ORDER BY intent.seq LIMIT ?"
        )
        try:  # the partial index of intents: O(intents), not O(events), on a long run
            return self.rows(sql.format(hint="INDEXED BY events_one_intent"), (run_id, limit))
        except apsw.SQLError:
            return self.rows(sql.format(hint=""), (run_id, limit))

    def usage(self, run: Row) -> dict[str, int | float]:
        """Totals of the numeric ``usage`` fields of the run's ``llm_call`` events.

        The log is append-only, so totals are cached per run and only newer events are summed.
        """
        run_id = str(run["id"])
        key = (run_id, str(run.get("created_at")))
        upto, cached = self.database.cached_usage(key)
        last_seq = int(run.get("last_seq") or 0)
        if upto >= last_seq and upto:
            return dict(cached)
        totals = dict(cached)
        try:
            found = self.conn.execute(
                "SELECT usage.key, SUM(usage.value) FROM events AS e, "
                "json_each(e.payload, '$.usage') AS usage WHERE e.run_id = ? AND e.seq > ? "
                "AND e.seq <= ? AND e.type = 'llm_call' AND json_valid(e.payload) "
                "AND json_type(e.payload, '$.usage') = 'object' "
                "AND usage.type IN ('integer', 'real') GROUP BY usage.key",
                (run_id, upto, last_seq),
            ).fetchall()
        except apsw.SQLError:
            return totals
        for name, total in found:
            if isinstance(total, int | float):
                totals[str(name)] = totals.get(str(name), 0) + total
        self.database.store_usage(key, last_seq, totals)
        return dict(totals)

    # -- durable state --------------------------------------------------------------------

    def checkpoints(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        return self.rows(
            "SELECT * FROM checkpoints WHERE run_id = ? ORDER BY round LIMIT ?",
            (run_id, limit), optional=True,
        )

    def operations(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        return self.rows(
            "SELECT * FROM operations WHERE run_id = ? ORDER BY created_at, step_id, sequence "
            "LIMIT ?",
            (run_id, limit), optional=True,
        )

    def steps(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        return self.rows(
            "SELECT * FROM steps WHERE run_id = ? ORDER BY started_at, name LIMIT ?",
            (run_id, limit), optional=True,
        )

    def timers(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        return self.rows(
            "SELECT * FROM timers WHERE run_id = ? ORDER BY wake_at, name LIMIT ?",
            (run_id, limit), optional=True,
        )

    def messages(self, run_id: str, limit: int = ROW_LIMIT) -> list[Row]:
        """Messages sent to or from the run, oldest first."""
        return self.rows(
            "SELECT * FROM messages WHERE to_run_id = ? OR from_run_id = ? ORDER BY id LIMIT ?",
            (run_id, run_id, limit), optional=True,
        )
