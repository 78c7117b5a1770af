"""Operation records: the ``operations`` table (LocalRuntime's claims and records, Temporal's
kept records) and their ``operation_completed`` events.

Only a lease holder writes a run's log. A write given the ``Lease`` this process holds on
the operation's run is fenced by it: a claim checks the fence, and a finish appends
``operation_completed`` through :func:`._log.append` in the same transaction, so a fenced
owner (or a finished run) gets FencedOut (RunTerminal) and nothing is stored. Without a
lease the record is stored in ``operations`` alone and no run's log is written.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

import apsw

from ..._errors import FencedOut, RunNotFound, RunTerminal
from ..._json import encode_checked
from ..._time import from_db, to_db
from .._operation_records import (
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
)
from .._records import Lease, NewEvent
from ._base import SQLiteBase
from ._log import append, check_fence

__all__ = ["OperationOps"]

_WHERE: Final = "run_id = ? AND step_id = ? AND sequence = ?"
_SELECT: Final = (
    "SELECT kind, handler_id, input_digest, status, record, claim_owner, claim_expires_at, "
    f"attempts FROM operations WHERE {_WHERE}"
)
_INSERT: Final = (
    "INSERT INTO operations (run_id, step_id, sequence, kind, handler_id, input_digest, "
    "input_json, status, outcome, record, claim_owner, claim_expires_at, attempts, "
    "created_at, updated_at, completed_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _key(key: OperationKey) -> tuple[str, str, int]:
    return (key.run_id, key.step_id, key.sequence)


def _select(conn: apsw.Connection, key: OperationKey) -> OperationRow | None:
    row = conn.execute(_SELECT, _key(key)).fetchone()
    if row is None:
        return None
    kind, handler_id, digest, status, record, owner, expires, attempts = row
    return OperationRow(
        kind=kind,
        handler_id=handler_id,
        input_digest=digest,
        status=status,
        record=record,
        claim_owner=owner,
        claim_expires_at=None if expires is None else from_db(expires),
        attempts=int(attempts),
    )


def _completed_event(operation: NewOperation, outcome: OperationOutcome, attempts: int) -> NewEvent:
    """The ``operation_completed`` event of a stored record."""
    payload: dict[str, Any] = {
        "step_id": operation.key.step_id,
        "sequence": operation.key.sequence,
        "kind": operation.kind,
        "handler_id": operation.handler_id,
        "outcome": outcome.outcome,
        "input_digest": operation.input_digest,
        "attempts": attempts,
        **outcome.details,
    }
    return NewEvent("operation_completed", encode_checked(payload))


def _complete(
    conn: apsw.Connection,
    now: datetime,
    operation: NewOperation,
    outcome: OperationOutcome,
    *,
    owner: str | None,
    lease: Lease | None,
    event_attempts: int | None,
) -> OperationRow | None:
    """Store ``outcome`` as the identity's record (None), or return the row that prevents
    it: one already completed, or one bound to other input. Under ``lease`` the fence is
    checked first and the ``operation_completed`` event appended before the record, so a
    fenced finish raises with nothing stored."""
    key = operation.key
    if lease is not None:
        check_fence(conn, lease)
    row = _select(conn, key)
    if row is not None and (row.status == "completed" or not operation.binds(row)):
        return row
    attempts = 1 if row is None else row.attempts
    if lease is not None:
        event = _completed_event(operation, outcome, event_attempts or attempts)
        append(conn, lease, now, [event])
    stamp = to_db(now)
    if row is None:
        conn.execute(
            _INSERT,
            (
                *_key(key),
                operation.kind,
                operation.handler_id,
                operation.input_digest,
                operation.input_json,
                "completed",
                outcome.outcome,
                outcome.record_json,
                owner,
                None,
                1,
                stamp,
                stamp,
                stamp,
            ),
        )
    else:
        conn.execute(
            "UPDATE operations SET status = 'completed', outcome = ?, record = ?, "
            "claim_owner = ?, claim_expires_at = NULL, updated_at = ?, completed_at = ? "
            f"WHERE {_WHERE}",
            (outcome.outcome, outcome.record_json, owner, stamp, stamp, *_key(key)),
        )
    return None


class OperationOps(SQLiteBase):
    """Claims and records of durable operations, fenced by the run's lease when one is held."""

    async def get_operation(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, or None."""
        return await self._read(lambda conn: _select(conn, key))

    async def claim_operation(
        self,
        operation: NewOperation,
        *,
        owner: str,
        ttl: timedelta,
        owner_prefix: str | None = None,
        lease: Lease | None = None,
    ) -> OperationClaim:
        """Claim the identity for ``owner`` until now + ``ttl``, counting one attempt.

        Not claimed when the row is completed, bound to other input, or claimed live by an
        owner not starting with ``owner_prefix`` (a claim of this prefix is a stale one of
        the caller's own and is taken over). Under ``lease`` the claim is fenced.
        """
        prefix = owner if owner_prefix is None else owner_prefix
        key = operation.key

        def write(conn: apsw.Connection) -> OperationClaim:
            now = self.clock()
            row = _select(conn, key)
            if row is not None and (
                row.status == "completed"
                or not operation.binds(row)
                or row.held_elsewhere(prefix, now)
            ):
                return OperationClaim(False, row)
            if lease is not None:
                check_fence(conn, lease)
            stamp, expires = to_db(now), now + ttl
            if row is None:
                conn.execute(
                    _INSERT,
                    (
                        *_key(key),
                        operation.kind,
                        operation.handler_id,
                        operation.input_digest,
                        operation.input_json,
                        "claimed",
                        None,
                        None,
                        owner,
                        to_db(expires),
                        1,
                        stamp,
                        stamp,
                        None,
                    ),
                )
                attempts = 1
            else:
                attempts = row.attempts + 1
                conn.execute(
                    "UPDATE operations SET claim_owner = ?, claim_expires_at = ?, attempts = ?, "
                    f"updated_at = ? WHERE {_WHERE}",
                    (owner, to_db(expires), attempts, stamp, *_key(key)),
                )
            return OperationClaim(
                True,
                OperationRow(
                    kind=operation.kind,
                    handler_id=operation.handler_id,
                    input_digest=operation.input_digest,
                    status="claimed",
                    record=None,
                    claim_owner=owner,
                    claim_expires_at=expires,
                    attempts=attempts,
                ),
            )

        return await self._write(write, durable=False)

    async def renew_operation_claim(
        self,
        key: OperationKey,
        *,
        owner: str,
        ttl: timedelta,
        lease: Lease | None = None,
    ) -> bool:
        """Extend ``owner``'s claim to now + ``ttl``; False once it is lost (taken over,
        completed, or, under ``lease``, the run's fence no longer holds)."""

        def write(conn: apsw.Connection) -> bool:
            if lease is not None and not _fence_holds(conn, lease):
                return False
            now = self.clock()
            return (
                conn.execute(
                    "UPDATE operations SET claim_expires_at = ?, updated_at = ? "
                    f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ? RETURNING 1",
                    (to_db(now + ttl), to_db(now), *_key(key), owner),
                ).fetchone()
                is not None
            )

        return await self._write(write, durable=False)

    async def count_operation_attempt(
        self,
        key: OperationKey,
        *,
        owner: str,
        ttl: timedelta,
        lease: Lease | None = None,
    ) -> OperationRow | None:
        """Count the next attempt under ``owner``'s claim (extended to now + ``ttl``);
        the completed row instead if another owner finished meanwhile. Fenced under
        ``lease``."""

        def write(conn: apsw.Connection) -> OperationRow | None:
            if lease is not None:
                check_fence(conn, lease)
            row = _select(conn, key)
            if row is not None and row.status == "completed":
                return row
            now = self.clock()
            conn.execute(
                "UPDATE operations SET attempts = attempts + 1, claim_expires_at = ?, "
                f"updated_at = ? WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ?",
                (to_db(now + ttl), to_db(now), *_key(key), owner),
            )
            return None

        return await self._write(write, durable=False)

    async def release_operation_claim(self, key: OperationKey, *, owner: str) -> bool:
        """Drop ``owner``'s claim, leaving no row (its handler's answer was refused)."""

        def write(conn: apsw.Connection) -> bool:
            return (
                conn.execute(
                    f"DELETE FROM operations WHERE {_WHERE} AND status = 'claimed' "
                    "AND claim_owner = ? RETURNING 1",
                    (*_key(key), owner),
                ).fetchone()
                is not None
            )

        return await self._write(write, durable=False)

    async def finish_operation(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        *,
        owner: str,
        lease: Lease | None = None,
    ) -> OperationRow | None:
        """Store the terminal record, whoever holds the claim now; None once stored.

        Returns instead the row that prevents it: completed first by another owner (its
        record wins), or bound to other input. Under ``lease`` the fence is checked first
        (FencedOut or RunTerminal, nothing stored) and ``operation_completed``, with the
        row's attempts, is appended to the run's log in the same transaction.
        """
        return await self._write(
            lambda conn: _complete(
                conn,
                self.clock(),
                operation,
                outcome,
                owner=owner,
                lease=lease,
                event_attempts=None,
            )
        )

    async def save_operation_record(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        *,
        lease: Lease | None = None,
    ) -> OperationRow | None:
        """Keep a record produced elsewhere (Temporal): completed, with no claim and one
        attempt in its event; like :meth:`finish_operation` otherwise."""
        return await self._write(
            lambda conn: _complete(
                conn,
                self.clock(),
                operation,
                outcome,
                owner=None,
                lease=lease,
                event_attempts=1,
            )
        )


def _fence_holds(conn: apsw.Connection, lease: Lease) -> bool:
    try:
        check_fence(conn, lease)
    except (FencedOut, RunNotFound, RunTerminal):
        return False
    return True
