"""LocalRuntime: durable operations on the embedded store (SPEC §2).

One ``operations`` row per identity (run_id, step_id, sequence), bound to its input digest::

    absent ──claim──▶ claimed (owner, expires_at) ──finish──▶ completed (record)
                        │  ▲ renewed every claim_ttl/3 while the handler runs
                        └──┘ taken over once expired: its owner died (at least once)

In one process, concurrent calls for one identity queue behind an in-flight map, so one of
them runs the handler and the others receive its record. Across processes the claim decides:
a live claim held elsewhere is polled until its record appears or it expires. The final
write is conditional on the row still being ``claimed``: a completed record is never
replaced, and whoever finishes second returns the record stored first.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Final, TypeVar

import apsw

from .._errors import (
    DigestMismatch,
    InputDrift,
    InvalidInput,
    InvalidInvocation,
    StoreError,
)
from .._json import dumps
from .._time import Clock, as_timedelta, to_db
from ..contract import (
    DEFAULT_MAX_INPUT_BYTES,
    Failure,
    Invocation,
    OperationKind,
    Outcome,
    Record,
    Success,
    Suspended,
    decode_record,
    encode_record,
)
from ..store import SQLiteStore
from ._registry import Handler, HandlerRegistry, attempt_outcome
from ._retry import RetryPolicy

__all__ = [
    "DEFAULT_CLAIM_TTL", "DEFAULT_POLL_INTERVAL", "DEFAULT_RETRY", "LocalRuntime",
    "append_operation_event",
]

T = TypeVar("T")

DEFAULT_RETRY: Final = RetryPolicy()
DEFAULT_CLAIM_TTL: Final = timedelta(seconds=30)
DEFAULT_POLL_INTERVAL: Final = timedelta(milliseconds=100)

_WHERE: Final = "run_id = ? AND step_id = ? AND sequence = ?"
_COLUMNS: Final = (
    "kind, handler_id, input_digest, status, record, claim_owner, claim_expires_at, attempts"
)


@dataclass(frozen=True, slots=True)
class _Stored:
    """The identity is completed: its stored record's text."""

    text: str | None


@dataclass(frozen=True, slots=True)
class _Row:
    """The parts of an ``operations`` row the runtime decides on."""

    kind: str
    handler_id: str
    input_digest: str
    status: str
    record: str | None
    claim_owner: str | None
    claim_expires_at: str | None
    attempts: int


class LocalRuntime:
    """A DurableRuntime on the embedded store: at most one record per invocation identity.

    ``retry`` retries retryable failures in place before one is persisted; ``claim_ttl``
    bounds how long a dead process's claim blocks others (it is renewed while the handler
    runs); ``poll_interval`` is how often a waiter looks for another process's record.
    A sync handler runs on the event loop and blocks renewal: keep it under ``claim_ttl``.
    """

    def __init__(
        self,
        store: SQLiteStore,
        registry: HandlerRegistry,
        retry: RetryPolicy = DEFAULT_RETRY,
        *,
        claim_ttl: timedelta | float = DEFAULT_CLAIM_TTL,
        max_input_bytes: int | None = DEFAULT_MAX_INPUT_BYTES,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        if not isinstance(registry, HandlerRegistry):
            raise InvalidInput(f"registry must be a HandlerRegistry, not {type(registry).__name__}")
        if not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry must be a RetryPolicy, not {type(retry).__name__}")
        if max_input_bytes is not None and (
            isinstance(max_input_bytes, bool)
            or not isinstance(max_input_bytes, int)
            or max_input_bytes < 1
        ):
            raise InvalidInput(f"max_input_bytes must be a positive int, not {max_input_bytes!r}")
        self.store = store
        self.registry = registry
        self.retry = retry
        self.claim_ttl = _positive(claim_ttl, "claim_ttl")
        self.poll_interval = _positive(poll_interval, "poll_interval")
        self.max_input_bytes = max_input_bytes
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._executions = itertools.count(1)
        self._inflight: dict[str, asyncio.Future[Record | None]] = {}

    async def execute(self, invocation: Invocation, *, inline: Handler | None = None) -> Record:
        """The terminal record of ``invocation``: the stored one on replay, else run and stored.

        ``inline`` is an in-process callable ``(invocation, request) -> output`` (sync or
        async) used instead of the registered handler; only its record is stored.
        """
        if not isinstance(invocation, Invocation):
            raise InvalidInvocation(
                f"execute expects an Invocation, got {type(invocation).__name__}"
            )
        invocation.validate(self.max_input_bytes)
        if inline is not None and not callable(inline):
            raise InvalidInput(
                "inline must be a callable (invocation, request) -> output",
                run_id=invocation.run_id,
            )
        digest = invocation.input_digest()
        key = invocation.stable_key()
        while (running := self._inflight.get(key)) is not None:
            await asyncio.wait({running})
            shared = running.result()
            if shared is not None and shared.invocation == invocation:
                return shared
        done: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = done
        result: Record | None = None
        try:
            result = await self._execute(invocation, digest, inline)
            return result
        finally:
            del self._inflight[key]
            done.set_result(result)

    # -- one execution ------------------------------------------------------------------

    async def _execute(self, inv: Invocation, digest: str, inline: Handler | None) -> Record:
        row = await self._read(partial(_select, inv=inv))
        if row is not None:
            _check_same(row, inv, digest)
            if row.status == "completed":
                return _decode(row.record, inv)
        handler = inline if inline is not None else self.registry.require(inv)
        owner = f"{self.owner}/{next(self._executions)}"
        claimed = await self._acquire(inv, digest, owner, row)
        if isinstance(claimed, Record):
            return claimed
        return await self._run(inv, handler, owner)

    async def _acquire(
        self, inv: Invocation, digest: str, owner: str, row: _Row | None
    ) -> Record | int:
        """Claim the identity (its attempt number), or the record another owner stored."""
        clock, ttl, mine = self.store.clock, self.claim_ttl, self.owner + "/"
        while True:
            if row is None or not _held_elsewhere(row, mine, clock()):
                claim = partial(_claim, inv=inv, digest=digest, owner=owner, mine=mine,
                                clock=clock, ttl=ttl)
                result = await self._write(claim, durable=False)
                if isinstance(result, _Stored):
                    return _decode(result.text, inv)
                if result is not None:
                    return result
            await asyncio.sleep(self.poll_interval.total_seconds())
            row = await self._read(partial(_select, inv=inv))
            if row is not None:
                _check_same(row, inv, digest)
                if row.status == "completed":
                    return _decode(row.record, inv)

    async def _run(self, inv: Invocation, handler: Handler, owner: str) -> Record:
        """Run the attempts under a renewed claim, then store the record (fenced)."""
        renewer = asyncio.create_task(self._renew(inv, owner))
        try:
            try:
                result = await self._attempts(inv, handler, owner)
            finally:
                renewer.cancel()
                await asyncio.wait({renewer})
        except (DigestMismatch, InputDrift):
            await self._write(partial(_release, inv=inv, owner=owner), durable=False)
            raise
        if isinstance(result, Record):
            return result
        record = Record.for_invocation(inv, result)
        finish = partial(_finish, inv=inv, owner=owner, record=record, clock=self.store.clock)
        stored = await self._write(finish, durable=True)
        return record if stored is None else _decode(stored.text, inv)

    async def _attempts(self, inv: Invocation, handler: Handler, owner: str) -> Outcome | Record:
        """Retry retryable failures in place under the RetryPolicy; the last outcome wins."""
        attempt = 1
        while True:
            outcome = await attempt_outcome(handler, inv)
            retry = isinstance(outcome, Failure) and outcome.retryable
            if not retry or attempt >= self.retry.max_attempts:
                return outcome
            await asyncio.sleep(self.retry.delay(attempt).total_seconds())
            attempt += 1
            bump = partial(_next_attempt, inv=inv, owner=owner, clock=self.store.clock,
                           ttl=self.claim_ttl)
            stored = await self._write(bump, durable=False)
            if stored is not None:
                return _decode(stored.text, inv)

    async def _renew(self, inv: Invocation, owner: str) -> None:
        """Extend the claim every claim_ttl/3 until cancelled or lost."""
        renew = partial(_renew_claim, inv=inv, owner=owner, clock=self.store.clock,
                        ttl=self.claim_ttl)
        while True:
            await asyncio.sleep(self.claim_ttl.total_seconds() / 3)
            try:
                held = await self._write(renew, durable=False)
            except StoreError:
                continue  # a busy or closing store; the fenced final write decides
            if not held:
                return

    # -- store access -------------------------------------------------------------------

    async def _read(self, fn: Callable[[apsw.Connection], T]) -> T:
        try:
            return await self.store.read(fn)
        except apsw.Error as error:
            raise StoreError(f"SQLite error on {self.store.path}: {error}") from None

    async def _write(self, fn: Callable[[apsw.Connection], T], *, durable: bool) -> T:
        def guarded(conn: apsw.Connection) -> T:
            try:
                return fn(conn)
            except apsw.Error as error:
                raise StoreError(f"SQLite error on {self.store.path}: {error}") from None

        return await self.store.write(guarded, durable=durable)





def _positive(value: timedelta | float, name: str) -> timedelta:
    duration = as_timedelta(value, name=name)
    if duration <= timedelta(0):
        raise InvalidInput(f"{name} must be positive, not {duration}")
    return duration


def _decode(text: str | None, inv: Invocation) -> Record:
    if text is None:
        raise StoreError(
            f"operation {inv.stable_key()} is completed but holds no record; the row was "
            "edited outside zincir",
            run_id=inv.run_id,
        )
    record = decode_record(text)
    if record.invocation != inv:
        raise StoreError(
            f"the stored record of operation {inv.stable_key()} belongs to another "
            "invocation; the row was edited outside zincir",
            run_id=inv.run_id,
        )
    return record


# -- transaction functions (each runs inside one store write or read) ---------------------


def _key(inv: Invocation) -> tuple[str, str, int]:
    return (inv.run_id, inv.step_id, inv.sequence)


def _returned_int(conn: apsw.Connection, sql: str, params: tuple[Any, ...]) -> int:
    """The integer an ``UPDATE … RETURNING`` of one existing row gives back."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise StoreError(f"expected one row from: {sql}")
    return int(row[0])


def _select(conn: apsw.Connection, *, inv: Invocation) -> _Row | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM operations WHERE {_WHERE}", _key(inv)).fetchone()
    return None if row is None else _Row(*row)


def _check_same(row: _Row, inv: Invocation, digest: str) -> None:
    """A known identity must arrive with its recorded input, kind and handler."""
    key = inv.stable_key()
    if row.input_digest != digest:
        raise InputDrift(
            f"operation {key} was recorded with input {row.input_digest} but arrived with "
            f"{digest}; an identity's input never changes (use a new sequence for new input)",
            run_id=inv.run_id,
        )
    kind = OperationKind(inv.kind).value
    if (row.kind, row.handler_id) != (kind, inv.handler_id):
        raise InputDrift(
            f"operation {key} was recorded for {row.kind}/{row.handler_id} but arrived for "
            f"{kind}/{inv.handler_id}; an identity's kind and handler never change",
            run_id=inv.run_id,
        )


def _held_elsewhere(row: _Row, mine: str, now: datetime) -> bool:
    """A live claim of another runtime (this runtime's own claims are stale: it is in flight)."""
    return (
        row.status == "claimed"
        and row.claim_owner is not None
        and not row.claim_owner.startswith(mine)
        and row.claim_expires_at is not None
        and row.claim_expires_at > to_db(now)
    )


def _claim(
    conn: apsw.Connection, *, inv: Invocation, digest: str, owner: str, mine: str,
    clock: Clock, ttl: timedelta,
) -> _Stored | int | None:
    """Claim the identity: the attempt number, the stored record, or None while held."""
    now = clock()
    stamp, expires = to_db(now), to_db(now + ttl)
    row = _select(conn, inv=inv)
    if row is None:
        conn.execute(
            "INSERT INTO operations (run_id, step_id, sequence, kind, handler_id, input_digest, "
            "input_json, status, claim_owner, claim_expires_at, attempts, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'claimed', ?, ?, 1, ?, ?)",
            (*_key(inv), OperationKind(inv.kind).value, inv.handler_id, digest,
             inv.input_json, owner, expires, stamp, stamp),
        )
        return 1
    _check_same(row, inv, digest)
    if row.status == "completed":
        return _Stored(row.record)
    if _held_elsewhere(row, mine, now):
        return None
    return _returned_int(
        conn,
        "UPDATE operations SET claim_owner = ?, claim_expires_at = ?, attempts = attempts + 1, "
        f"updated_at = ? WHERE {_WHERE} RETURNING attempts",
        (owner, expires, stamp, *_key(inv)),
    )


def _renew_claim(
    conn: apsw.Connection, *, inv: Invocation, owner: str, clock: Clock, ttl: timedelta
) -> bool:
    now = clock()
    row = conn.execute(
        "UPDATE operations SET claim_expires_at = ?, updated_at = ? "
        f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ? RETURNING 1",
        (to_db(now + ttl), to_db(now), *_key(inv), owner),
    ).fetchone()
    return row is not None


def _next_attempt(
    conn: apsw.Connection, *, inv: Invocation, owner: str, clock: Clock, ttl: timedelta
) -> _Stored | None:
    """Count the next attempt under our claim; the stored record if another owner finished."""
    row = _select(conn, inv=inv)
    if row is not None and row.status == "completed":
        return _Stored(row.record)
    now = clock()
    conn.execute(
        "UPDATE operations SET attempts = attempts + 1, claim_expires_at = ?, updated_at = ? "
        f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ?",
        (to_db(now + ttl), to_db(now), *_key(inv), owner),
    )
    return None


def _release(conn: apsw.Connection, *, inv: Invocation, owner: str) -> None:
    """Drop our claim without a record (the handler's answer was refused)."""
    conn.execute(
        f"DELETE FROM operations WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ?",
        (*_key(inv), owner),
    )


def _finish(
    conn: apsw.Connection, *, inv: Invocation, owner: str, record: Record, clock: Clock
) -> _Stored | None:
    """Store the record unless one is already stored (then return that one)."""
    stamp = to_db(clock())
    outcome = record.outcome
    name = "success" if isinstance(outcome, Success) else (
        "failure" if isinstance(outcome, Failure) else "suspended")
    text = encode_record(record)
    row = _select(conn, inv=inv)
    if row is not None and row.status == "completed":
        return _Stored(row.record)
    if row is None:
        conn.execute(
            "INSERT INTO operations (run_id, step_id, sequence, kind, handler_id, input_digest, "
            "input_json, status, outcome, record, claim_owner, attempts, created_at, "
            "updated_at, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'completed', ?, ?, ?, 1, "
            "?, ?, ?)",
            (*_key(inv), OperationKind(inv.kind).value, inv.handler_id, record.input_digest,
             inv.input_json, name, text, owner, stamp, stamp, stamp),
        )
        attempts = 1
    else:
        attempts = _returned_int(
            conn,
            "UPDATE operations SET status = 'completed', outcome = ?, record = ?, "
            "claim_owner = ?, claim_expires_at = NULL, updated_at = ?, completed_at = ? "
            f"WHERE {_WHERE} RETURNING attempts",
            (name, text, owner, stamp, stamp, *_key(inv)),
        )
    append_operation_event(conn, record, name, attempts, stamp)
    return None


def append_operation_event(
    conn: apsw.Connection, record: Record, name: str, attempts: int, stamp: str
) -> None:
    """``operation_completed`` in the run's log, when the run exists (gapless seq)."""
    inv = record.invocation
    row = conn.execute(
        "UPDATE agent_runs SET last_seq = last_seq + 1, updated_at = ? WHERE id = ? "
        "RETURNING last_seq",
        (stamp, inv.run_id),
    ).fetchone()
    if row is None:
        return
    payload: dict[str, Any] = {
        "step_id": inv.step_id,
        "sequence": inv.sequence,
        "kind": OperationKind(inv.kind).value,
        "handler_id": inv.handler_id,
        "outcome": name,
        "input_digest": record.input_digest,
        "attempts": attempts,
    }
    if isinstance(record.outcome, Failure):
        payload["error"] = record.outcome.error
        payload["retryable"] = record.outcome.retryable
    elif isinstance(record.outcome, Suspended):
        payload["reason"] = str(record.outcome.reason)
    conn.execute(
        "INSERT INTO events (run_id, seq, type, payload, created_at) "
        "VALUES (?, ?, 'operation_completed', ?, ?)",
        (inv.run_id, row[0], dumps(payload, what="event payload"), stamp),
    )
