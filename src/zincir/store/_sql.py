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
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, TypeVar

from ._records import Lease, NewEvent

__all__ = ["Params", "Rules", "Sql", "Tx", "micros", "sql"]

T = TypeVar("T")
Params = Sequence[object]

_FRAGMENTS: Final[dict[str, dict[str, str]]] = {
    "sqlite": {
        "in_list": "IN (SELECT value FROM json_each(?))",
        "for_share": "",
        "for_update": "",
        "bytewise": "",
        "now_plus": "zincir_plus_us(zincir_now(), ?)",
    },
    "postgres": {
        "in_list": "= ANY(?)",
        "for_share": " FOR SHARE",
        "for_update": " FOR UPDATE",
        "bytewise": ' COLLATE "C"',
        "now_plus": "zincir_now() + CAST(? AS bigint) * interval '1 microsecond'",
    },
}
"""The dialects' differences at the statement level: ``{in_list}`` matches a list given by
:meth:`Tx.values`; ``{for_share}``/``{for_update}`` lock rows where the server runs
transactions side by side (SQLite runs one writer); ``{bytewise}`` orders text by bytes, as
SQLite always does; ``{now_plus}`` is the clock plus a parameter's microseconds."""

_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")


def _postgres_text(text: str) -> str:
    """``text`` with psycopg's placeholders: ``?`` outside literals becomes ``%s``, and every
    ``%`` is doubled (psycopg reads ``%`` anywhere in a statement given parameters)."""
    parts = _LITERAL.split(text.replace("%", "%%"))
    return "".join(part if i % 2 else part.replace("?", "%s") for i, part in enumerate(parts))


class Sql:
    """One statement, written once; ``sqlite`` and ``postgres`` are its two texts."""

    __slots__ = ("postgres", "sqlite")

    def __init__(self, sqlite: str, postgres: str) -> None:
        self.sqlite = sqlite
        self.postgres = postgres

    def __repr__(self) -> str:
        return f"sql({self.sqlite!r})"


def sql(text: str) -> Sql:
    """A statement in SQLite's form with ``{fragment}`` names; both texts, built once."""
    return Sql(
        text.format_map(_FRAGMENTS["sqlite"]),
        _postgres_text(text.format_map(_FRAGMENTS["postgres"])),
    )


def micros(duration: timedelta) -> int:
    """``duration`` in whole microseconds: the parameter of ``{now_plus}``."""
    return duration // timedelta(microseconds=1)


class Tx(Protocol):
    """One transaction's connection, as a rule function sees it: rows come back as tuples.

    ``read_content``/``write_content`` keep content bodies each backend's way; the
    ``append``, ``take_messages`` and ``send`` methods are the families not yet written
    once (the agent log, messages): each backend's own function, called as one.
    """

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

    def read_content(self, digests: Sequence[str]) -> Mapping[str, str]:
        """The stored text of each ``content`` digest found (bodies kept the backend's way:
        compressed on SQLite)."""

    def write_content(self, run_id: str, rows: Sequence[tuple[str, str]]) -> None:
        """Store content rows (digest, text) that may exist already, and the run's
        references to them (references first where a prune runs beside the writer)."""

    def append(self, lease: Lease, events: Sequence[NewEvent] = ()) -> int:
        """Check the lease's fence and append ``events`` (the agent log's one writer)."""

    def take_messages(self, to_run_id: str, topic: str, taker: str, **about: str) -> None:
        """Mark the unreceived messages of ``topic`` to a run as received by ``taker``."""

    def send(self, to_run_id: str, topic: str, body: str) -> None:
        """Send a message from outside any run, without a key."""


class Rules:
    """What a family's operations need of a backend: a write and a read transaction, each
    running a rule function on the backend's :class:`Tx`."""

    async def _write_tx(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one write transaction (which may run it more than once)."""
        raise NotImplementedError

    async def _read_tx(self, fn: Callable[[Tx], T], *, offload: bool = False) -> T:
        """Run ``fn`` in one read snapshot; ``offload`` a read that may scan."""
        raise NotImplementedError
