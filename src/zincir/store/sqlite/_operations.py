"""Operation records: the ``operations`` table (LocalRuntime's claims and records, Temporal's
kept records) and their ``operation_completed`` events.

Only a lease holder writes a run's log. A write given the ``Lease`` this process holds on
the operation's run is fenced by it: a claim checks the fence, and a finish appends
``operation_completed`` through :func:`._log.append` in the same transaction, so a fenced
owner (or a finished run) gets FencedOut (RunTerminal) and nothing is stored. Without a
lease the record is stored in ``operations`` alone and no run's log is written.

A claim made under a lease records it (``claim_lease_owner``, ``claim_lease_token``). Every
read of the row judges it against the run's row: once that lease no longer holds the run
(a newer token, released or expired, the run finished) the claim is ``claim_fenced``, dead at
once, and the run's next owner takes it over without waiting for ``claim_expires_at``. A
claim made without a lease lives until it expires.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

import apsw

from ..._time import from_db, to_db
from .._content import ContentIndex, InputPlan, stored_record
from .._operation_records import (
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
)
from .._operation_rows import (
    OPERATION_COLUMNS,
    check_log_lease,
    claimed_row,
    completed_event,
    fence_holds,
    key_params,
    lease_columns,
    operation_row,
    record_composer,
)
from .._records import TERMINAL_STATUSES, Lease, LogEntry
from ._agent import write_entries
from ._base import SQLiteBase
from ._content import reader, write_content
from ._log import check_fence, lease_expiry_sql

__all__ = ["OperationOps"]

_WHERE: Final = "run_id = ? AND step_id = ? AND sequence = ?"
_SELECT: Final = f"SELECT {OPERATION_COLUMNS} FROM operations WHERE {_WHERE}"
_RUN_LEASE: Final = (
    f"SELECT status, lease_owner, lease_token, {lease_expiry_sql()} FROM agent_runs WHERE id = ?"
)
_COLUMNS: Final = (
    "run_id, step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome, "
    "record, claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at, "
    "claim_lease_owner, claim_lease_token, input_parts"
)
_INSERT: Final = f"INSERT INTO operations ({_COLUMNS}) VALUES ({', '.join('?' * 19)})"
_CLAIM_NEW: Final = (
    f"INSERT INTO operations ({_COLUMNS}) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, 'claimed', NULL, "
    "NULL, ?8, ?9, 1, ?10, ?10, NULL, ?11, ?12, ?13 WHERE ?12 IS NULL OR EXISTS (SELECT 1 FROM "
    "agent_runs WHERE id = ?1 AND lease_owner = ?11 AND lease_token = ?12 "
    "AND status IN ('pending', 'running')) "
    "ON CONFLICT (run_id, step_id, sequence) DO NOTHING RETURNING 1"
)
"""The first claim of an identity, fenced under a lease, in one statement: nothing is
inserted when a row exists or the lease no longer holds the live run (the full path then
tells which)."""
_COMPLETE_CLAIMED: Final = (
    "UPDATE operations SET status = 'completed', outcome = ?, record = ?, claim_owner = ?, "
    "claim_expires_at = NULL, updated_at = ?, completed_at = ?, claim_lease_owner = ?, "
    f"claim_lease_token = ? WHERE {_WHERE} AND status = 'claimed' AND kind = ? "
    "AND handler_id = ? AND input_digest = ? RETURNING attempts"
)
"""A claimed row bound to this very input, completed; no row back means the full path
decides (no row yet, completed already, or bound to other input)."""


def _lease_lost(
    claim_lease: tuple[str | None, int | None],
    run: tuple[str | None, str | None, int | None, str | None],
    now: datetime,
) -> bool:
    """Whether the lease a claim was made under no longer holds its run: a newer token took
    the run, the lease was released or expired, the run finished (or is gone)."""
    owner, token = claim_lease
    status, run_owner, run_token, expires = run
    return (
        status is None
        or status in TERMINAL_STATUSES
        or run_token != token
        or run_owner != owner
        or expires is None
        or expires <= to_db(now)
    )


def _select(
    conn: apsw.Connection,
    key: OperationKey,
    now: datetime,
    content: ContentIndex,
    *,
    judge: bool = True,
    whole: bool = True,
) -> OperationRow | None:
    """The identity's row, its record composed whole (as stored unless ``whole``), its claim
    judged at ``now`` against its run's lease (unless ``judge`` is off: ``claim_fenced`` is
    then False)."""
    row = conn.execute(_SELECT, key_params(key)).fetchone()
    if row is None:
        return None
    status, lease_owner, lease_token = row[3], row[8], row[9]
    fenced = False
    if judge and status == "claimed" and lease_token is not None:
        run = conn.execute(_RUN_LEASE, (key.run_id,)).fetchone()
        fenced = _lease_lost((lease_owner, lease_token), run or (None,) * 4, now)
    return operation_row(
        row,
        fenced=fenced,
        time=from_db,
        compose=record_composer(content, reader(conn), key, whole=whole),
    )


def _complete(
    conn: apsw.Connection,
    now: datetime,
    operation: NewOperation,
    outcome: OperationOutcome,
    plan: InputPlan,
    content: ContentIndex,
    *,
    owner: str | None,
    lease: Lease | None,
    event_attempts: int | None = None,
    log: Sequence[LogEntry] = (),
) -> OperationRow | None:
    """Store ``outcome`` as the identity's record (None), or return the row that prevents
    it: one already completed, or one bound to other input. Under ``lease`` the fence is
    checked first and the ``operation_completed`` event, then the ``log`` entries, are
    appended before the record, so a fenced finish raises with nothing stored."""
    key = operation.key
    stamp = to_db(now)
    record = stored_record(operation, outcome, plan)
    completed = conn.execute(
        _COMPLETE_CLAIMED,
        (
            outcome.outcome,
            record,
            owner,
            stamp,
            stamp,
            *lease_columns(lease),
            *key_params(key),
            operation.kind,
            operation.handler_id,
            operation.input_digest,
        ),
    ).fetchone()
    if completed is not None:  # a fenced append raises, and the transaction is rolled back
        write_content(conn, key.run_id, plan)
        if lease is not None:
            event = completed_event(operation, outcome, event_attempts or int(completed[0]))
            write_entries(conn, lease, now, log, leading=[event], stamp=stamp)
        return None
    row = _select(conn, key, now, content, judge=False)
    if row is not None and operation.blocked_by(row):
        if lease is not None:
            check_fence(conn, lease)
        return row
    attempts = 1 if row is None else row.attempts
    if lease is not None:
        event = completed_event(operation, outcome, event_attempts or attempts)
        write_entries(conn, lease, now, log, leading=[event], stamp=stamp)
    if row is None:
        write_content(conn, key.run_id, plan)
        conn.execute(
            _INSERT,
            (
                *key_params(key),
                operation.kind,
                operation.handler_id,
                operation.input_digest,
                plan.input_json,
                "completed",
                outcome.outcome,
                record,
                owner,
                None,
                1,
                stamp,
                stamp,
                stamp,
                *lease_columns(lease),
                plan.input_parts,
            ),
        )
    else:
        write_content(conn, key.run_id, plan)
        conn.execute(
            "UPDATE operations SET status = 'completed', outcome = ?, record = ?, "
            "claim_owner = ?, claim_expires_at = NULL, updated_at = ?, completed_at = ?, "
            f"claim_lease_owner = ?, claim_lease_token = ? WHERE {_WHERE}",
            (
                outcome.outcome,
                record,
                owner,
                stamp,
                stamp,
                *lease_columns(lease),
                *key_params(key),
            ),
        )
    return None


class OperationOps(SQLiteBase):
    """Claims and records of durable operations, fenced by the run's lease when one is held."""

    async def get_operation(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, or None."""
        return await self._read(lambda conn: _select(conn, key, self.clock(), self._content))

    async def get_operation_as_stored(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, its record as stored (``null`` for an input kept apart)."""
        return await self._read(
            lambda conn: _select(conn, key, self.clock(), self._content, whole=False)
        )

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
        the caller's own and is taken over). Under ``lease`` the claim is fenced and records
        that lease: once a newer token holds the run (or the lease was released or expired,
        or the run finished) the claim is dead at once and the next claimer takes it over
        without waiting for its expiry. A claim made without a lease lives until it expires.
        """
        prefix = owner if owner_prefix is None else owner_prefix
        key = operation.key
        plan = self._content.plan(operation)

        def write(conn: apsw.Connection) -> OperationClaim:
            now = self.clock()
            stamp, expires = to_db(now), now + ttl
            lease_owner, lease_token = lease_columns(lease)
            write_content(conn, key.run_id, plan)
            first = conn.execute(
                _CLAIM_NEW,
                (
                    *key_params(key),
                    operation.kind,
                    operation.handler_id,
                    operation.input_digest,
                    plan.input_json,
                    owner,
                    to_db(expires),
                    stamp,
                    lease_owner,
                    lease_token,
                    plan.input_parts,
                ),
            ).fetchone()
            if first is not None:
                return OperationClaim(True, claimed_row(operation, owner, expires, 1, lease))
            row = _select(conn, key, now, self._content)
            if row is not None and operation.claim_blocked_by(row, prefix, now):
                return OperationClaim(False, row)
            if lease is not None:
                check_fence(conn, lease)
            if row is None:
                conn.execute(
                    _INSERT,
                    (
                        *key_params(key),
                        operation.kind,
                        operation.handler_id,
                        operation.input_digest,
                        plan.input_json,
                        "claimed",
                        None,
                        None,
                        owner,
                        to_db(expires),
                        1,
                        stamp,
                        stamp,
                        None,
                        lease_owner,
                        lease_token,
                        plan.input_parts,
                    ),
                )
                attempts = 1
            else:
                attempts = row.attempts + 1
                conn.execute(
                    "UPDATE operations SET claim_owner = ?, claim_expires_at = ?, attempts = ?, "
                    f"updated_at = ?, claim_lease_owner = ?, claim_lease_token = ? WHERE {_WHERE}",
                    (
                        owner,
                        to_db(expires),
                        attempts,
                        stamp,
                        lease_owner,
                        lease_token,
                        *key_params(key),
                    ),
                )
            return OperationClaim(True, claimed_row(operation, owner, expires, attempts, lease))

        claim = await self._write(write, durable=False)
        self._content.committed(key.run_id, (plan,))
        return claim

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
            if lease is not None and not fence_holds(lambda: check_fence(conn, lease)):
                return False
            now = self.clock()
            return (
                conn.execute(
                    "UPDATE operations SET claim_expires_at = ?, updated_at = ? "
                    f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ? RETURNING 1",
                    (to_db(now + ttl), to_db(now), *key_params(key), owner),
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
            now = self.clock()
            row = _select(conn, key, now, self._content)
            if row is not None and row.status == "completed":
                return row
            conn.execute(
                "UPDATE operations SET attempts = attempts + 1, claim_expires_at = ?, "
                f"updated_at = ? WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ?",
                (to_db(now + ttl), to_db(now), *key_params(key), owner),
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
                    (*key_params(key), owner),
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
        log: Sequence[LogEntry] = (),
    ) -> OperationRow | None:
        """Store the terminal record, whoever holds the claim now; None once stored.

        Returns instead the row that prevents it: completed first by another owner (its
        record wins), or bound to other input. Under ``lease`` the fence is checked first
        (FencedOut or RunTerminal, nothing stored) and ``operation_completed``, with the
        row's attempts, is appended to the run's log in the same transaction, followed by
        the ``log`` entries made from the record (an agent loop's response or tool result);
        an entry that does not fit the log (DuplicateToolCall, UnknownToolCall) stores
        nothing.
        """
        check_log_lease(operation, log, lease)
        plan = self._content.plan(operation, outcome)
        blocking = await self._write(
            lambda conn: _complete(
                conn,
                self.clock(),
                operation,
                outcome,
                plan,
                self._content,
                owner=owner,
                lease=lease,
                log=log,
            )
        )
        if blocking is None:
            self._content.committed(operation.key.run_id, (plan,))
        return blocking

    async def finish_operation_claiming(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        ahead: Sequence[tuple[NewOperation, str]],
        *,
        owner: str,
        ttl: timedelta,
        lease: Lease,
        log: Sequence[LogEntry] = (),
    ) -> tuple[OperationRow | None, frozenset[OperationKey]]:
        """:meth:`finish_operation` under ``lease``, and once the record is stored, a claim
        on each of the ``ahead`` identities for its owner (until now + ``ttl``) in the same
        transaction: the operations the record says run next then need no claim commit of
        their own. Returns the blocking row (nothing claimed) or None, and the keys claimed
        (an identity that already has a row is left to its own claim)."""
        check_log_lease(operation, log, lease)
        plan = self._content.plan(operation, outcome)
        plans = [(claim, claim_owner, self._content.plan(claim)) for claim, claim_owner in ahead]

        def claim_ahead(
            conn: apsw.Connection,
            claim: NewOperation,
            claim_owner: str,
            claim_plan: InputPlan,
            stamp: str,
            expires: str,
        ) -> bool:
            write_content(conn, claim.key.run_id, claim_plan)
            return (
                conn.execute(
                    _CLAIM_NEW,
                    (
                        *key_params(claim.key),
                        claim.kind,
                        claim.handler_id,
                        claim.input_digest,
                        claim_plan.input_json,
                        claim_owner,
                        expires,
                        stamp,
                        lease.owner,
                        lease.token,
                        claim_plan.input_parts,
                    ),
                ).fetchone()
                is not None
            )

        def write(conn: apsw.Connection) -> tuple[OperationRow | None, frozenset[OperationKey]]:
            now = self.clock()
            blocking = _complete(
                conn,
                now,
                operation,
                outcome,
                plan,
                self._content,
                owner=owner,
                lease=lease,
                log=log,
            )
            if blocking is not None:
                return blocking, frozenset()
            stamp, expires = to_db(now), to_db(now + ttl)
            claimed = frozenset(
                claim.key
                for claim, claim_owner, claim_plan in plans
                if claim_ahead(conn, claim, claim_owner, claim_plan, stamp, expires)
            )
            return None, claimed

        result = await self._write(write)
        if result[0] is None:
            self._content.committed(operation.key.run_id, [plan, *(p for _, _, p in plans)])
        return result

    async def save_operation_record(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        *,
        lease: Lease | None = None,
    ) -> OperationRow | None:
        """Keep a record produced elsewhere (Temporal): completed, with no claim and one
        attempt in its event; like :meth:`finish_operation` otherwise."""
        plan = self._content.plan(operation, outcome)
        blocking = await self._write(
            lambda conn: _complete(
                conn,
                self.clock(),
                operation,
                outcome,
                plan,
                self._content,
                owner=None,
                lease=lease,
                event_attempts=1,
            )
        )
        if blocking is None:
            self._content.committed(operation.key.run_id, (plan,))
        return blocking
