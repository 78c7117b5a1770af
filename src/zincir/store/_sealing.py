"""Which stored columns hold user payloads, and how a store becomes and stays encrypted.

:data:`SEALED_COLUMNS` is the one list: the statements that write or read those columns
declare them (``sql(..., seals=..., opens=...)``), the database refuses a plain value in
any of them once encrypted (a trigger per table, so a path that forgot to seal fails
loudly instead of leaking), and ``zincir reencrypt`` walks them. Identifiers, statuses,
sequence numbers, times, digests and a run's budget stay clear.

An encrypted database has a ``store_encryption`` row (``sealed``; ``sealing`` while
``zincir reencrypt`` seals a database that was plain, when a plain value still opens as
itself) and, per key that ever sealed, a check value: a key given under a known id that does
not open its check is refused at open, before it could seal anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

from .._encryption import Encryption, Sealer
from .._errors import EncryptionKeyMissing, InvalidInput, PayloadTampered
from ._sql import Sql, Tx, sql

__all__ = [
    "BYTEA_COLUMNS",
    "KEY_CHECKS",
    "SEALED_COLUMNS",
    "SEALED_ROWS",
    "check_keys",
    "create_guards",
    "encryption_state",
    "mark_encrypted",
    "sealing_plain",
    "settle_encryption",
    "verify_keys",
]

SEALED_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "agent_runs": ("config", "result", "last_error"),
    "events": ("payload",),
    "archived_events": ("payload",),
    "checkpoints": ("state", "evidence"),
    "messages": ("payload",),
    "operations": ("input_json", "input_parts", "record"),
    "restart_checkpoints": ("payload",),
    "approvals": ("arguments", "decision"),
    "content": ("body",),
    "stream_items": ("payload",),
    "langgraph_checkpoints": ("checkpoint", "metadata"),
    "langgraph_writes": ("value",),
    "schedules": ("prompt",),
}
"""Every column holding a user payload, by table."""

SEALED_ROWS: Final[dict[str, tuple[tuple[str, ...], str | None]]] = {
    "agent_runs": (("id",), "id"),
    "events": (("run_id", "seq"), "run_id"),
    "archived_events": (("run_id", "seq"), "run_id"),
    "checkpoints": (("id",), "run_id"),
    "messages": (("id",), "to_run_id"),
    "operations": (("run_id", "step_id", "sequence"), "run_id"),
    "restart_checkpoints": (("run_id", "checkpoint_id"), "run_id"),
    "approvals": (("approval_id",), "run_id"),
    "content": (("hash",), None),
    "stream_items": (("run_id", "seq"), "run_id"),
    "langgraph_checkpoints": (("thread_id", "checkpoint_ns", "checkpoint_id"), "run_id"),
    "langgraph_writes": (("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), None),
    "schedules": (("name",), None),
}
"""Per table of :data:`SEALED_COLUMNS`: its key (unique on both backends; ``zincir
reencrypt`` walks the table in its order) and the column naming a row's run (None: content
is shared by runs, a LangGraph write names its thread)."""

BYTEA_COLUMNS: Final = frozenset({"langgraph_checkpoints.checkpoint", "langgraph_writes.value"})
"""The sealed columns PostgreSQL keeps as ``bytea`` (the rest are ``text``)."""

_CHECK: Final = "zincir key check"

_STATE: Final = sql("SELECT state FROM store_encryption WHERE id = 1")
_MARK: Final = sql(
    "INSERT INTO store_encryption (id, state, created_at) VALUES (1, ?, zincir_now()) "
    "ON CONFLICT (id) DO UPDATE SET state = excluded.state"
)
KEY_CHECKS: Final = sql("SELECT key_id, check_value FROM sealing_keys ORDER BY key_id")
_ADD_KEY_CHECK: Final = sql(
    "INSERT INTO sealing_keys (key_id, check_value, created_at) VALUES (?, ?, zincir_now()) "
    "ON CONFLICT (key_id) DO NOTHING"
)
_HOLDS_PAYLOADS: Final = sql(
    "SELECT 1 WHERE EXISTS (SELECT 1 FROM agent_runs) OR EXISTS (SELECT 1 FROM content) "
    "OR EXISTS (SELECT 1 FROM langgraph_checkpoints) OR EXISTS (SELECT 1 FROM langgraph_writes)"
)


def encryption_state(tx: Tx) -> str | None:
    """``sealed``, ``sealing`` (a plain database being sealed), or None (not encrypted)."""
    row = tx.one(_STATE)
    return None if row is None else str(row[0])


def _sqlite_guard(table: str, columns: tuple[str, ...], action: str) -> str:
    kept = "" if action == "INSERT" else " AND NEW.{c} IS NOT OLD.{c}"
    test = " OR ".join(
        f"(NEW.{c} IS NOT NULL AND NOT (typeof(NEW.{c}) = 'blob' "
        f"AND substr(NEW.{c}, 1, 3) = X'7A7331'){kept.format(c=c)})"
        for c in columns
    )
    return (
        f"DROP TRIGGER IF EXISTS zincir_sealed_{table}_{action.lower()}; "
        f"CREATE TRIGGER IF NOT EXISTS zincir_sealed_{table}_{action.lower()} BEFORE {action} "
        f"ON {table} WHEN {test} BEGIN SELECT RAISE(ABORT, "
        f"'zincir: a plain value written to {table} in an encrypted store'); END"
    )


def _postgres_guard(table: str, columns: tuple[str, ...]) -> str:
    def plain(c: str) -> str:
        if f"{table}.{c}" in BYTEA_COLUMNS:
            return f"NEW.{c} IS NOT NULL AND substring(NEW.{c} from 1 for 3) <> '\\x7a7331'::bytea"
        return f"NEW.{c} IS NOT NULL AND left(NEW.{c}, 4) <> 'zs1:'"

    inserted = " OR ".join(f"({plain(c)})" for c in columns)
    updated = " OR ".join(f"({plain(c)} AND NEW.{c} IS DISTINCT FROM OLD.{c})" for c in columns)
    refuse = (
        f"RAISE EXCEPTION 'zincir: a plain value written to {table} in an encrypted store' "
        "USING ERRCODE = 'check_violation';"
    )
    return (
        f"CREATE OR REPLACE FUNCTION zincir_sealed_{table}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN IF TG_OP = 'UPDATE' THEN IF {updated} THEN {refuse} "
        f"END IF; ELSIF {inserted} THEN {refuse} END IF; RETURN NEW; END $$; "
        f"CREATE OR REPLACE TRIGGER zincir_sealed_{table} BEFORE INSERT OR UPDATE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION zincir_sealed_{table}()"
    )


def create_guards(tx: Tx) -> None:
    """The triggers refusing a plain value written to any sealed column (idempotent). An
    update leaving a column as it was is not checked, so runs go on while ``zincir
    reencrypt`` seals a database that was plain, row by row."""
    for table, columns in SEALED_COLUMNS.items():
        for action in ("INSERT", "UPDATE"):
            tx.execute(Sql(_sqlite_guard(table, columns, action), "SELECT 1"))
        tx.execute(Sql("SELECT 1", _postgres_guard(table, columns)))


def mark_encrypted(tx: Tx, state: str) -> None:
    """Record the database as encrypted (``sealed``) or being sealed (``sealing``), with its
    guards."""
    create_guards(tx)
    tx.execute(_MARK, (state,))


def verify_keys(rows: list[tuple[Any, ...]], sealer: Sealer, where: str) -> set[str]:
    """The key ids of the stored check ``rows``; PayloadTampered for a key given under one of
    them that does not open its check (a wrong key, refused before it reads or seals)."""
    encryption = sealer.encryption
    assert encryption is not None
    known: set[str] = set()
    for key_id, check in rows:
        known.add(str(key_id))
        if encryption.key(str(key_id)) is None:
            continue
        try:
            opened = sealer.open(check)
        except PayloadTampered:
            opened = None
        if opened != _CHECK:
            raise PayloadTampered(
                f"the key given as {key_id!r} is not the key {where} was sealed with under that "
                "id; give the right key file"
            )
    return known


def check_keys(tx: Tx, sealer: Sealer, where: str) -> None:
    """Refuse a key given under an id whose check it does not open; store the active key's."""
    known = verify_keys(tx.all(KEY_CHECKS), sealer, where)
    assert sealer.encryption is not None
    if sealer.encryption.active not in known:
        tx.execute(_ADD_KEY_CHECK, (sealer.encryption.active, sealer.seal(_CHECK)))


_SEAL_PLAIN: ContextVar[bool] = ContextVar("zincir_seal_plain", default=False)


@contextmanager
def sealing_plain() -> Iterator[None]:
    """Within it, a plain database holding payloads opened with keys is marked ``sealing``
    (for ``zincir reencrypt`` to seal its values) instead of refused."""
    token = _SEAL_PLAIN.set(True)
    try:
        yield
    finally:
        _SEAL_PLAIN.reset(token)


def settle_encryption(
    tx: Tx, encryption: Encryption | None, *, text: bool, where: str
) -> Sealer | None:
    """At open: the store's sealer (None for a plain database opened without keys).

    A new database opened with keys becomes encrypted; a plain one holding payloads is
    refused (``zincir reencrypt`` seals it); an encrypted one opened without keys raises
    EncryptionKeyMissing, and with a wrong key under a known id PayloadTampered."""
    state = encryption_state(tx)
    if state is None:
        if encryption is None:
            return None
        if tx.one(_HOLDS_PAYLOADS) is None:
            state = "sealed"
        elif _SEAL_PLAIN.get():
            state = "sealing"
        else:
            raise InvalidInput(
                f"{where} holds plain (unencrypted) payloads; seal them first with "
                f"`zincir reencrypt --db {where} --key-file KEYS --to {encryption.active}`, "
                "then open it with encryption="
            )
        mark_encrypted(tx, state)
    elif encryption is None:
        ids = ", ".join(str(key_id) for key_id, _ in tx.all(KEY_CHECKS)) or "unknown"
        raise EncryptionKeyMissing(
            f"{where} is encrypted (key ids: {ids}); open it with "
            "encryption=zincir.Encryption(...) holding those keys, or set "
            "$ZINCIR_ENCRYPTION_KEYS to its key file's JSON (commands take --key-file)"
        )
    sealer = Sealer(encryption, text=text, plain_ok=state == "sealing")
    check_keys(tx, sealer, where)
    return sealer
