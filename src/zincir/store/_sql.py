"""The seam between the store's rules and its backends: statements written once, and the
transaction a rule function runs in.

A rule function (``ensure_timer``, ``decide_approval``) is a plain function of a
:class:`Tx` and its arguments: it runs the family's statements, judges what they returned,
and fences and appends, once for every backend. A backend plugs in by giving each write or
read transaction a :class:`Tx` over its connection (``SqliteTx``, ``PostgresTx``) and by
implementing :class:`Rules`' two runners; its own files keep only its connection and
transaction machinery, its error mapping and the paths that really differ.

Statements (:func:`sql`) are written once, in SQLite's form: ``?`` placeholders, and the
clock as ``zincir_now()``, which PostgreSQL defines as the server's clock (or a pinned one)
and SQLite registers on its connections as the ``now`` the transaction was given, so both
backends stamp and judge time in SQL alike (on SQLite only inside a ``SqliteTx``: the
function reads the time its thread's last transaction was given). The few dialect
differences are named fragments (``{in_list}``, ``{for_update}``, ``{now_plus}``), filled
in for each backend, and the PostgreSQL text's placeholders converted, once at import.

Values that cross the seam in a dialect's own shape go through the :class:`Tx`: a time
parameter (:meth:`Tx.stamp`: text on SQLite, a datetime on PostgreSQL), a stored time
(:meth:`Tx.time`), a list to match with ``{in_list}`` (:meth:`Tx.values`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from ._records import Lease, NewEvent

if TYPE_CHECKING:
    from .._encryption import Sealer

__all__ = [
    "Params",
    "Rules",
    "Sql",
    "Tx",
    "micros",
    "opened_row",
    "opened_rows",
    "sealed_params",
    "sql",
]

T = TypeVar("T")
Params = Sequence[object]

PLUS_US: Final = "zincir_plus_us"
"""SQLite's SQL function (registered on every connection) adding microseconds to a stored
time."""


def _holder_append(run: str) -> str:
    """SQLite: the time of the newest event past the row's ``last_seq`` (the lease holder's
    last append since the row was written), or NULL."""
    return (
        f"(SELECT e.created_at FROM events AS e WHERE e.run_id = {run}.id "
        f"AND e.seq > {run}.last_seq ORDER BY e.seq DESC LIMIT 1)"
    )


def lagging_last_seq(run: str = "agent_runs") -> str:
    """SQLite: the last seq of the ``agent_runs`` row named ``run``: the row's own, or its
    newest event's when the lease holder appended since the row was written. A run without
    an owner is read from its row alone: giving up a lease writes the row."""
    return (
        f"CASE WHEN {run}.lease_owner IS NULL THEN {run}.last_seq "
        f"ELSE max({run}.last_seq, coalesce((SELECT max(e.seq) FROM events AS e "
        f"WHERE e.run_id = {run}.id), 0)) END"
    )


def lagging_updated_at(run: str = "agent_runs") -> str:
    """SQLite: when the row named ``run`` last moved: the lease holder's last append since the
    row was written, else the row's own time; an ownerless run's row alone."""
    return (
        f"CASE WHEN {run}.lease_owner IS NULL THEN {run}.updated_at "
        f"ELSE coalesce({_holder_append(run)}, {run}.updated_at) END"
    )


def lagging_lease_expiry(run: str = "agent_runs") -> str:
    """SQLite: the lease expiry of the row named ``run``: the lease holder's last append since
    the row was written plus the lease's TTL, else the row's; NULL without a lease. The later
    write sets it, as a write of the row would."""
    return (
        f"CASE WHEN {run}.lease_expires_at IS NULL OR {run}.lease_ttl_us IS NULL "
        f"THEN {run}.lease_expires_at ELSE coalesce("
        f"{PLUS_US}({_holder_append(run)}, {run}.lease_ttl_us), {run}.lease_expires_at) END"
    )


class _RunColumn:
    """A fragment naming a column of an ``agent_runs`` row, given its alias as the format
    spec (``{last_seq:r}``; none: ``agent_runs``)."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[str], str]) -> None:
        self.build = build

    def __format__(self, alias: str) -> str:
        return self.build(alias or "agent_runs")


def _json_key(test: str) -> _RunColumn:
    """SQLite: the JSON object in a column has the key ``?`` with an entry passing ``test``."""
    return _RunColumn(lambda c: f"EXISTS (SELECT 1 FROM json_each({c}) WHERE key = ? AND {test})")


_FRAGMENTS: Final[dict[str, dict[str, object]]] = {
    "sqlite": {
        "in_list": "IN (SELECT value FROM json_each(?))",
        "json_items": "json_each(?)",
        "indexed_by": _RunColumn(lambda index: f" INDEXED BY {index}"),
        "for_share": "",
        "for_update": "",
        "for_no_key_update": "",
        "skip_locked": "",
        "hold_references": "",
        "bytewise": "",
        "now_plus": f"{PLUS_US}(zincir_now(), ?)",
        "later": "?",
        "json_field": _RunColumn(lambda column: f"({column} ->> ?)"),
        "last_seq": _RunColumn(lagging_last_seq),
        "updated_at": _RunColumn(lagging_updated_at),
        "lease_expiry": _RunColumn(lagging_lease_expiry),
        "caught_up": _RunColumn(
            lambda r: (
                f"last_seq = {lagging_last_seq(r)}, lease_expires_at = {lagging_lease_expiry(r)}"
            )
        ),
        "json_unparsed": _RunColumn(lambda c: f"instr({c}, '\\u0000') > 0"),
        "json_null": _RunColumn(
            lambda c: f"NOT EXISTS (SELECT 1 FROM json_each({c}) WHERE key = ? AND type <> 'null')"
        ),
        "json_bool": _json_key("type = ?"),
        "json_number": _json_key("type IN ('integer', 'real') AND value = ?"),
        "json_text": _json_key("type = 'text' AND value = ?"),
        "json_container": _json_key("type IN ('object', 'array') AND json(value) = json(?)"),
    },
    "postgres": {
        "in_list": "= ANY(?)",
        "json_items": "json_array_elements(CAST(? AS json))",
        "indexed_by": _RunColumn(lambda index: ""),
        "for_share": " FOR SHARE",
        "for_update": " FOR UPDATE",
        "for_no_key_update": " FOR NO KEY UPDATE",
        "skip_locked": " FOR NO KEY UPDATE SKIP LOCKED",
        "hold_references": "LOCK TABLE content_refs IN SHARE MODE",
        "bytewise": ' COLLATE "C"',
        "now_plus": "zincir_now() + CAST(? AS bigint) * interval '1 microsecond'",
        "later": "zincir_now() + CAST(? AS bigint) * interval '1 microsecond'",
        "json_field": _RunColumn(lambda c: f"(CAST({c} AS json) ->> CAST(? AS text))"),
        "last_seq": _RunColumn(lambda r: f"{r}.last_seq"),
        "updated_at": _RunColumn(lambda r: f"{r}.updated_at"),
        "lease_expiry": _RunColumn(lambda r: f"{r}.lease_expires_at"),
        "caught_up": _RunColumn(
            lambda r: f"last_seq = {r}.last_seq, lease_expires_at = {r}.lease_expires_at"
        ),
        "json_unparsed": _RunColumn(lambda c: f"{c} ~ '\\\\u(0000|[dD][89a-fA-F])'"),
        "json_null": _RunColumn(
            lambda c: f"COALESCE(jsonb_typeof(CAST({c} AS jsonb) -> ?), 'null') = 'null'"
        ),
        "json_bool": _RunColumn(lambda c: f"(CAST({c} AS jsonb) -> ?) = CAST(? AS jsonb)"),
        "json_number": _RunColumn(
            lambda c: f"(CAST({c} AS jsonb) -> ?) = CAST(CAST(? AS text) AS jsonb)"
        ),
        "json_text": _RunColumn(lambda c: f"(CAST({c} AS jsonb) -> ?) = to_jsonb(CAST(? AS text))"),
        "json_container": _RunColumn(lambda c: f"CAST(CAST({c} AS json) -> ? AS text) = ?"),
    },
}
"""The dialects' differences at the statement level: ``{in_list}`` matches a list given by
:meth:`Tx.values`; ``{for_share}``/``{for_update}``/``{for_no_key_update}`` lock rows
where the server runs transactions side by side (SQLite runs one writer), ``{skip_locked}``
passes over rows another transaction has locked (workers claiming at once), and
``{hold_references}`` (a statement) keeps content references from being added until COMMIT;
``{bytewise}`` orders text by bytes, as SQLite always does; ``{now_plus}`` is the clock plus
a parameter's microseconds, and ``{later}`` the same given by :meth:`Tx.later` (SQLite
computes the time itself: no SQL function call on the hot path);
``{json_field:c}`` is the top-level field named by a parameter of the JSON text in column
``c`` (a string field as text); ``{json_items}`` is the items of a JSON array given as
text, each as ``value``; ``{indexed_by:i}`` (after a table) makes SQLite's planner use
index ``i`` where it would misjudge a list (PostgreSQL's needs no hint).

``{last_seq:r}``, ``{updated_at:r}`` and ``{lease_expiry:r}`` read those columns of the run
row aliased ``r`` (no alias: ``agent_runs``), and ``{caught_up:r}`` are SET clauses writing
the first and last back: on PostgreSQL the row's own columns; on SQLite, where the lease
holder's appends leave the row unwritten (one page less a commit), the row's or its newest
events' (see ``sqlite/_log.py``).

The ``{json_...:c}`` tests match the JSON object in column ``c`` under the key given as a
parameter, by JSON type and value: ``json_null`` (null or missing; the key alone),
``json_bool`` (the key, ``'true'``/``'false'``), ``json_number`` (1 matches 1.0),
``json_text`` (no NUL: PostgreSQL refuses one) and ``json_container`` (compact JSON text).
``{json_unparsed:c}`` finds the JSON text PostgreSQL's parser refuses (a ``\\u0000``, a
lone surrogate; SQLite's: a ``\\u0000``), whose rows are to be matched outside SQL."""

_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")


def _postgres_text(text: str) -> str:
    """``text`` with psycopg's placeholders: ``?`` outside literals becomes ``%s``, and every
    ``%`` is doubled (psycopg reads ``%`` anywhere in a statement given parameters)."""
    parts = _LITERAL.split(text.replace("%", "%%"))
    return "".join(part if i % 2 else part.replace("?", "%s") for i, part in enumerate(parts))


class Sql:
    """One statement, written once; ``sqlite`` and ``postgres`` are its two texts.

    ``seals`` are the positions of its parameters that hold user payloads and ``opens``
    those of its result columns: in an encrypted store the transaction seals the one and
    opens the other (see :mod:`zincir._encryption`); ``run_param`` is the position of the
    parameter naming the run, for the error a value that fails its check raises.
    """

    __slots__ = ("opens", "postgres", "run_param", "seals", "sqlite")

    def __init__(
        self,
        sqlite: str,
        postgres: str,
        seals: tuple[int, ...] = (),
        opens: tuple[int, ...] = (),
        run_param: int | None = None,
    ) -> None:
        self.sqlite = sqlite
        self.postgres = postgres
        self.seals = seals
        self.opens = opens
        self.run_param = run_param

    def __repr__(self) -> str:
        return f"sql({self.sqlite!r})"


def sql(
    text: str,
    *,
    seals: tuple[int, ...] = (),
    opens: tuple[int, ...] = (),
    run_param: int | None = None,
) -> Sql:
    """A statement in SQLite's form with ``{fragment}`` names; both texts, built once.
    ``seals``/``opens``: the parameters and result columns holding user payloads."""
    return Sql(
        text.format_map(_FRAGMENTS["sqlite"]),
        _postgres_text(text.format_map(_FRAGMENTS["postgres"])),
        seals,
        opens,
        run_param,
    )


def sealed_params(sealer: Sealer, statement: Sql, params: Params) -> Params:
    """``params`` with the statement's payload parameters sealed (None stays None)."""
    values = list(params)
    for index in statement.seals:
        value = values[index]
        if value is not None:
            values[index] = sealer.seal(value)  # type: ignore[arg-type]
    return values


def opened_rows(
    sealer: Sealer | None, statement: Sql, rows: list[tuple[Any, ...]], params: Params
) -> list[tuple[Any, ...]]:
    """``rows`` of ``statement`` as read, with its payload columns opened when the store is
    encrypted (every backend's transactions and read-only views read through this)."""
    if sealer is None or not statement.opens:
        return rows
    return [opened_row(sealer, statement, row, params) for row in rows]


def opened_row(
    sealer: Sealer, statement: Sql, row: tuple[Any, ...], params: Params
) -> tuple[Any, ...]:
    """``row`` with the statement's payload columns opened."""
    run_id = None if statement.run_param is None else params[statement.run_param]
    values = list(row)
    for index in statement.opens:
        values[index] = sealer.open(values[index], run_id)  # type: ignore[arg-type]
    return tuple(values)


def micros(duration: timedelta) -> int:
    """``duration`` in whole microseconds: the parameter of ``{now_plus}``."""
    return duration // timedelta(microseconds=1)


class Tx(Protocol):
    """One transaction's connection, as a rule function sees it: rows come back as tuples.

    ``pack_content``/``unpack_content`` keep content bodies each backend's way; ``append``
    is the agent log's writer: each backend's own function, called as one. ``sealer`` is
    the store's :class:`~zincir._encryption.Sealer` (None: not encrypted), which
    :meth:`execute` and the reads apply to the statement's ``seals`` and ``opens``.
    """

    sealer: Sealer | None

    def execute(self, statement: Sql, params: Params = ()) -> None:
        """Run ``statement``."""

    def executemany(self, statement: Sql, rows: Iterable[Params]) -> None:
        """Run ``statement`` once per parameter row (none: nothing)."""

    def one(self, statement: Sql, params: Params = ()) -> tuple[Any, ...] | None:
        """The first row of ``statement``, or None."""

    def all(self, statement: Sql, params: Params = ()) -> list[tuple[Any, ...]]:
        """Every row of ``statement``."""

    def stamp(self, moment: datetime | None) -> object:
        """``moment`` as a parameter (None stays None)."""

    def time(self, value: Any) -> datetime:
        """A stored time, as read, as an aware datetime."""

    def values(self, items: Sequence[str]) -> object:
        """``items`` as the parameter of ``{in_list}``."""

    def append(self, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
        """Check the lease's fence and append ``events`` (the agent log's one writer)."""

    def violates(self, error: Exception, index: str) -> bool:
        """Whether ``error``, raised by a statement of this transaction, is a unique
        violation of ``index`` (SQLite names no index: any constraint error)."""

    def later(self, ttl: timedelta) -> object:
        """The parameter of ``{later}``, the clock plus ``ttl``: on SQLite the stored time,
        computed here (cheaper than ``{now_plus}``'s SQL function on a hot path); on
        PostgreSQL ``ttl``'s microseconds, added by the server."""

    def lock(self, space: int, keys: Iterable[str], *, exclusive: bool) -> None:
        """Hold a lock on each of ``keys`` in ``space`` until the transaction ends, taken in
        sorted order (PostgreSQL's advisory locks; SQLite runs one writer: nothing)."""

    def insert_events(self, rows: Sequence[Params]) -> None:
        """Insert event rows (run id, seq, type, payload, tool call id, pieces) created at
        the transaction's time, under a fence it already took: each backend's one writer."""

    def pack_content(
        self, rows: Sequence[tuple[str, str]], *, new: bool = False
    ) -> Sequence[tuple[str, object]]:
        """Content rows (digest, text) as this backend inserts them: SQLite compresses long
        bodies (and, ``new``, first leaves out the rows it has, looked up when there are
        many: cheaper than compressing for an ignored insert); PostgreSQL's TOAST does."""

    def unpack_content(self, body: object) -> str:
        """A stored content body as its text."""


class Rules:
    """What a family's operations need of a backend: a write and a read transaction, each
    running a rule function on the backend's :class:`Tx`."""

    async def _write_tx(self, fn: Callable[[Tx], T], *, durable: bool = True) -> T:
        """Run ``fn`` in one write transaction (which may run it more than once);
        ``durable=False`` (a claim, a mark) may commit without waiting for the disk."""
        raise NotImplementedError

    async def _read_tx(self, fn: Callable[[Tx], T], *, offload: bool = False) -> T:
        """Run ``fn`` in one read snapshot; ``offload`` a read that may scan."""
        raise NotImplementedError

    blocking_tx = False
    """Whether :meth:`_write_tx_here` and :meth:`_read_tx_here` run (SQLite)."""

    def _write_tx_here(self, fn: Callable[[Tx], T], *, durable: bool = True) -> T:
        """:meth:`_write_tx` for a blocking caller, on its own thread: no event loop, no
        hand-off to another thread (the backend's one writer still serializes it)."""
        raise NotImplementedError

    def _write_alone_here(
        self, statement: Sql, params: Params, *, durable: bool = True
    ) -> bool | None:
        """One writing statement in its own transaction, for a blocking caller on its own
        thread: whether it changed a row; None (nothing written) if it could not run at
        once (the database busy), so the caller runs :meth:`_write_tx_here` instead."""
        raise NotImplementedError

    def _stamp_here(self) -> str:
        """The store's time as stored, for the parameters of :meth:`_write_alone_here`'s
        statement (which takes it bound, not from ``zincir_now()``)."""
        raise NotImplementedError

    def _read_tx_here(self, fn: Callable[[Tx], T]) -> T:
        """:meth:`_read_tx` for a blocking caller, on its own thread (a point read)."""
        raise NotImplementedError

    async def _write_first(
        self,
        statement: Sql,
        params: Params,
        found: T,
        rest: Callable[[Tx], T],
        *,
        durable: bool = True,
    ) -> T:
        """``found`` when ``statement`` (atomic on its own: a fenced claim) returns a row,
        else ``rest``'s result. Here both run in one write transaction; PostgreSQL commits
        the statement alone first (autocommit: no ``BEGIN``/``COMMIT`` round trips)."""

        def write(tx: Tx) -> T:
            return found if tx.one(statement, params) is not None else rest(tx)

        return await self._write_tx(write, durable=durable)
