"""Operation records: the ``operations`` table (LocalRuntime's claims and records, Temporal's
kept records) and their ``operation_completed`` events (PostgreSQL).

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

Concurrency: every write locks the identity's row first (``FOR UPDATE``, or the insert that
creates it, ``ON CONFLICT DO NOTHING`` then read again), and only then the run's row (the
fence), so writers of one identity queue on its row and never deadlock on the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

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
    OPERATION_WIDTH,
    check_log_lease,
    claimed_row,
    completed_event,
    fence_holds,
    key_params,
    lease_columns,
    operation_row,
    record_composer,
)
from .._records import Lease, LogEntry
from ._agent import write_entries
from ._base import Conn, PostgresBase, one
from ._content import reader, write_content
from ._log import check_fence

__all__ = ["OperationOps"]

_WHERE: Final = "run_id = %s AND step_id = %s AND sequence = %s"
_SELECT: Final = (
    f"SELECT {OPERATION_COLUMNS}, zincir_now(), "
    # claim_fenced: a claim made under a lease that no longer holds its run
    "(%s AND status = 'claimed' AND claim_lease_token IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM agent_runs AS run WHERE run.id = operations.run_id "
    "AND run.status IN ('pending', 'running') AND run.lease_token = claim_lease_token "
    "AND run.lease_owner = claim_lease_owner AND run.lease_expires_at > zincir_now())) "
    "FROM operations WHERE " + _WHERE
)
_INSERT: Final = (
    "INSERT INTO operations (run_id, step_id, sequence, kind, handler_id, input_digest, "
    "input_json, status, outcome, record, claim_owner, claim_expires_at, attempts, "
    "created_at, updated_at, completed_at, claim_lease_owner, claim_lease_token, input_parts) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, zincir_now() + %s::interval, 1, "
    "zincir_now(), zincir_now(), {completed}, %s, %s, %s) "
    "ON CONFLICT (run_id, step_id, sequence) DO NOTHING RETURNING claim_expires_at"
)


def _select(
    conn: Conn,
    key: OperationKey,
    content: ContentIndex,
    *,
    judge: bool = True,
    lock: bool = False,
    whole: bool = True,
) -> tuple[OperationRow, datetime] | None:
    """The identity's row, its claim judged against its run's lease at the database's now
    (unless ``judge`` is off: ``claim_fenced`` is then False), and that now; ``lock`` takes
    the row's lock until COMMIT; its record composed whole (as stored unless ``whole``)."""
    found = conn.execute(
        _SELECT + (" FOR UPDATE" if lock else ""), (judge, *key_params(key))
    ).fetchone()
    if found is None:
        return None
    now, fenced = found[OPERATION_WIDTH:]
    row = operation_row(
        found[:OPERATION_WIDTH],
        fenced=bool(fenced),
        compose=record_composer(content, reader(conn), key, whole=whole),
    )
    return row, now


def _create(
    conn: Conn,
    operation: NewOperation,
    plan: InputPlan,
    *,
    status: str,
    outcome: OperationOutcome | None,
    owner: str | None,
    ttl: timedelta | None,
    lease: Lease | None,
) -> tuple[datetime | None] | None:
    """Insert the identity's first row and return its (``claim_expires_at``,); None if a
    concurrent writer created it first (the caller reads it again)."""
    completed = "zincir_now()" if status == "completed" else "NULL"
    write_content(conn, operation.key.run_id, plan)
    created = conn.execute(
        _INSERT.format(completed=completed),
        (
            *key_params(operation.key),
            operation.kind,
            operation.handler_id,
            operation.input_digest,
            plan.input_json,
            status,
            None if outcome is None else outcome.outcome,
            None if outcome is None else stored_record(operation, outcome, plan),
            owner,
            ttl,
            *lease_columns(lease),
            plan.input_parts,
        ),
    ).fetchone()
    return None if created is None else (created[0],)


def _complete(
    conn: Conn,
    operation: NewOperation,
    outcome: OperationOutcome,
    plan: InputPlan,
    content: ContentIndex,
    *,
    owner: str | None,
    lease: Lease | None,
    event_attempts: int | None,
    log: Sequence[LogEntry] = (),
) -> OperationRow | None:
    """Store ``outcome`` as the identity's record (None), or return the row that prevents
    it: one already completed, or one bound to other input. Under ``lease`` the fence is
    checked and the ``operation_completed`` event, then the ``log`` entries, are appended
    in the same transaction, so a fenced finish raises with nothing stored."""
    key = operation.key
    while True:
        found = _select(conn, key, content, judge=False, lock=True)
        row = None if found is None else found[0]
        if row is not None and operation.blocked_by(row):
            if lease is not None:
                check_fence(conn, lease)
            return row
        if row is None:
            created = _create(
                conn,
                operation,
                plan,
                status="completed",
                outcome=outcome,
                owner=owner,
                ttl=None,
                lease=lease,
            )
            if created is None:
                continue  # a concurrent writer created the row: judge it instead
            attempts = 1
        else:
            attempts = row.attempts
            write_content(conn, key.run_id, plan)
            conn.execute(
                "UPDATE operations SET status = 'completed', outcome = %s, record = %s, "
                "claim_owner = %s, claim_expires_at = NULL, updated_at = zincir_now(), "
                "completed_at = zincir_now(), claim_lease_owner = %s, claim_lease_token = %s "
                f"WHERE {_WHERE}",
                (
                    outcome.outcome,
                    stored_record(operation, outcome, plan),
                    owner,
                    *lease_columns(lease),
                    *key_params(key),
                ),
            )
        if lease is not None:
            event = completed_event(operation, outcome, event_attempts or attempts)
            write_entries(conn, lease, log, leading=[event])
        return None


def _claim(
    conn: Conn,
    operation: NewOperation,
    plan: InputPlan,
    content: ContentIndex,
    owner: str,
    ttl: timedelta,
    prefix: str,
    lease: Lease | None,
) -> OperationClaim:
    """Claim the identity's row (locked or created first, then the run's fence)."""
    key = operation.key
    lease_owner, lease_token = lease_columns(lease)
    while True:
        found = _select(conn, key, content, lock=True)
        if found is None:
            created = _create(
                conn,
                operation,
                plan,
                status="claimed",
                outcome=None,
                owner=owner,
                ttl=ttl,
                lease=lease,
            )
            if created is None:
                continue  # a concurrent claimer created the row: judge it instead
            (expires,), attempts = created, 1
        else:
            row, now = found
            if operation.claim_blocked_by(row, prefix, now):
                return OperationClaim(False, row)
            expires, attempts = one(
                conn,
                "UPDATE operations SET claim_owner = %s, "
                "claim_expires_at = zincir_now() + %s::interval, attempts = attempts + 1, "
                "updated_at = zincir_now(), claim_lease_owner = %s, claim_lease_token = %s "
                f"WHERE {_WHERE} RETURNING claim_expires_at, attempts",
                (owner, ttl, lease_owner, lease_token, *key_params(key)),
            )
        if lease is not None:
            check_fence(conn, lease)  # raising rolls the claim back
        return OperationClaim(True, claimed_row(operation, owner, expires, int(attempts), lease))


class OperationOps(PostgresBase):
    """Claims and records of durable operations, fenced by the run's lease when one is held."""

    async def get_operation(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, or None."""

        def read(conn: Conn) -> OperationRow | None:
            found = _select(conn, key, self._content)
            return None if found is None else found[0]

        return await self._read(read)

    async def get_operation_as_stored(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, its record as stored (``null`` for an input kept apart)."""

        def read(conn: Conn) -> OperationRow | None:
            found = _select(conn, key, self._content, whole=False)
            return None if found is None else found[0]

        return await self._read(read)

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
        plan = self._content.plan(operation)
        claim = await self._write(
            lambda conn: _claim(conn, operation, plan, self._content, owner, ttl, prefix, lease),
            durable=False,
        )
        self._content.committed(operation.key.run_id, (plan,))
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

        def write(conn: Conn) -> bool:
            if lease is not None:
                conn.execute(f"SELECT 1 FROM operations WHERE {_WHERE} FOR UPDATE", key_params(key))
                if not fence_holds(lambda: check_fence(conn, lease)):
                    return False
            return (
                conn.execute(
                    "UPDATE operations SET claim_expires_at = zincir_now() + %s::interval, "
                    f"updated_at = zincir_now() WHERE {_WHERE} AND status = 'claimed' "
                    "AND claim_owner = %s RETURNING 1",
                    (ttl, *key_params(key), owner),
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

        def write(conn: Conn) -> OperationRow | None:
            found = _select(conn, key, self._content, lock=True)
            if lease is not None:
                check_fence(conn, lease)
            if found is not None and found[0].status == "completed":
                return found[0]
            conn.execute(
                "UPDATE operations SET attempts = attempts + 1, "
                "claim_expires_at = zincir_now() + %s::interval, updated_at = zincir_now() "
                f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = %s",
                (ttl, *key_params(key), owner),
            )
            return None

        return await self._write(write, durable=False)

    async def release_operation_claim(self, key: OperationKey, *, owner: str) -> bool:
        """Drop ``owner``'s claim, leaving no row (its handler's answer was refused)."""

        def write(conn: Conn) -> bool:
            return (
                conn.execute(
                    f"DELETE FROM operations WHERE {_WHERE} AND status = 'claimed' "
                    "AND claim_owner = %s RETURNING 1",
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
                operation,
                outcome,
                plan,
                self._content,
                owner=owner,
                lease=lease,
                event_attempts=None,
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
        transaction. Returns the blocking row (nothing claimed) or None, and the keys
        claimed (an identity that already has a row is left to its own claim)."""
        check_log_lease(operation, log, lease)
        plan = self._content.plan(operation, outcome)
        plans = [(claim, claim_owner, self._content.plan(claim)) for claim, claim_owner in ahead]

        def write(conn: Conn) -> tuple[OperationRow | None, frozenset[OperationKey]]:
            blocking = _complete(
                conn,
                operation,
                outcome,
                plan,
                self._content,
                owner=owner,
                lease=lease,
                event_attempts=None,
                log=log,
            )
            if blocking is not None:
                return blocking, frozenset()
            claimed = frozenset(
                claim.key
                for claim, claim_owner, claim_plan in plans
                if _create(
                    conn,
                    claim,
                    claim_plan,
                    status="claimed",
                    outcome=None,
                    owner=claim_owner,
                    ttl=ttl,
                    lease=lease,
                )
                is not None
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
