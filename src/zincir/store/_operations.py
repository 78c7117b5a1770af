"""Operation records, written once: the ``operations`` table (LocalRuntime's claims and
records, Temporal's kept records) and their ``operation_completed`` events.

Only a lease holder writes a run's log. A write given the ``Lease`` this process holds on
the operation's run is fenced by it: a claim checks the fence, and a finish appends
``operation_completed`` (:meth:`Tx.append`) in the same transaction, so a fenced owner (or a
finished run) gets FencedOut (RunTerminal) and nothing is stored. Without a lease the record
is stored in ``operations`` alone and no run's log is written.

A claim made under a lease records it (``claim_lease_owner``, ``claim_lease_token``). Every
read of the row judges it against the run's row: once that lease no longer holds the run
(a newer token, released or expired, the run finished) the claim is ``claim_fenced``, dead at
once, and the run's next owner takes it over without waiting for ``claim_expires_at``. A
claim made without a lease lives until it expires.

The common paths are one statement each: a first claim inserts its row only where the lease
holds the live run, and a finish completes the row claimed for this very input. Otherwise
every write locks the identity's row first (``{for_update}``, or the insert that creates it,
``ON CONFLICT DO NOTHING`` then read again), and only then the run's row (the fence), so
writers of one identity queue on its row and never deadlock on the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Final

from ._agent import write_entries
from ._content import ContentIndex, InputPlan, stored_record
from ._content_rows import read_content, write_input
from ._fence import check_fence
from ._operation_records import (
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
)
from ._operation_rows import (
    OPERATION_COLUMNS,
    OPERATION_SEALED,
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
from ._records import Lease, LogEntry
from ._sql import Rules, Tx, sql

__all__ = ["OperationOps"]

_WHERE: Final = "run_id = ? AND step_id = ? AND sequence = ?"
_JUDGED: Final = (
    f"SELECT {OPERATION_COLUMNS}, zincir_now(), "
    # claim_fenced: a claim made under a lease that no longer holds its run
    "(? AND status = 'claimed' AND claim_lease_token IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM agent_runs AS run WHERE run.id = operations.run_id "
    "AND run.status IN ('pending', 'running') AND run.lease_token = claim_lease_token "
    "AND run.lease_owner = claim_lease_owner AND {lease_expiry:run} > zincir_now())) "
    f"FROM operations WHERE {_WHERE}"
)
_SELECT: Final = sql(_JUDGED, opens=OPERATION_SEALED, run_param=1)
_LOCKED: Final = sql(_JUDGED + "{for_update}", opens=OPERATION_SEALED, run_param=1)
_LOCK: Final = sql(f"SELECT 1 FROM operations WHERE {_WHERE}{{for_update}}")
_COLUMNS: Final = (
    "run_id, step_id, sequence, kind, handler_id, input_digest, input_json, status, outcome, "
    "record, claim_owner, claim_expires_at, attempts, created_at, updated_at, completed_at, "
    "claim_lease_owner, claim_lease_token, input_parts"
)
_CLAIMED: Final = (
    "?, ?, ?, ?, ?, ?, ?, 'claimed', NULL, NULL, ?, {later}, 1, zincir_now(), zincir_now(), "
    "NULL, ?, ?, ?"
)
_CLAIM_FIRST: Final = sql(
    f"INSERT INTO operations ({_COLUMNS}) VALUES ({_CLAIMED}) "
    "ON CONFLICT (run_id, step_id, sequence) DO NOTHING RETURNING claim_expires_at",
    seals=(6, 11),
    run_param=0,
)
"""The first claim of an identity; no row back when it has a row already."""
_CLAIM_FENCED: Final = sql(
    f"INSERT INTO operations ({_COLUMNS}) SELECT {_CLAIMED} WHERE EXISTS (SELECT 1 FROM "
    "agent_runs WHERE id = ? AND lease_owner = ? AND lease_token = ? "
    "AND status IN ('pending', 'running')) "
    "ON CONFLICT (run_id, step_id, sequence) DO NOTHING RETURNING claim_expires_at",
    seals=(6, 11),
    run_param=0,
)
"""The first claim of an identity under a lease, in one statement: nothing is inserted when
a row exists or the lease no longer holds the live run (the full path then tells which; a
lease lost after the insert leaves the claim fenced at once)."""
_RECLAIM: Final = sql(
    "UPDATE operations SET claim_owner = ?, claim_expires_at = {later}, "
    "attempts = attempts + 1, updated_at = zincir_now(), claim_lease_owner = ?, "
    f"claim_lease_token = ? WHERE {_WHERE} RETURNING claim_expires_at, attempts"
)
_COMPLETED: Final = (
    "UPDATE operations SET status = 'completed', outcome = ?, record = ?, claim_owner = ?, "
    "claim_expires_at = NULL, updated_at = zincir_now(), completed_at = zincir_now(), "
    f"claim_lease_owner = ?, claim_lease_token = ? WHERE {_WHERE}"
)
_COMPLETE: Final = sql(_COMPLETED, seals=(1,), run_param=5)
_COMPLETE_CLAIMED: Final = sql(
    _COMPLETED + " AND status = 'claimed' AND kind = ? AND handler_id = ? AND input_digest = ? "
    "RETURNING attempts",
    seals=(1,),
    run_param=5,
)
"""A claimed row bound to this very input, completed; no row back means the full path
decides (no row yet, completed already, or bound to other input)."""
_CREATE_COMPLETED: Final = sql(
    f"INSERT INTO operations ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 'completed', ?, ?, ?, "
    "NULL, 1, zincir_now(), zincir_now(), zincir_now(), ?, ?, ?) "
    "ON CONFLICT (run_id, step_id, sequence) DO NOTHING RETURNING 1",
    seals=(6, 8, 12),
    run_param=0,
)
_RENEW: Final = sql(
    "UPDATE operations SET claim_expires_at = {later}, updated_at = zincir_now() "
    f"WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ? RETURNING 1"
)
_COUNT: Final = sql(
    "UPDATE operations SET attempts = attempts + 1, claim_expires_at = {later}, "
    f"updated_at = zincir_now() WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ?"
)
_RELEASE: Final = sql(
    f"DELETE FROM operations WHERE {_WHERE} AND status = 'claimed' AND claim_owner = ? RETURNING 1"
)


def _select(
    tx: Tx,
    key: OperationKey,
    content: ContentIndex,
    *,
    judge: bool = True,
    lock: bool = False,
    whole: bool = True,
) -> tuple[OperationRow, datetime] | None:
    """The identity's row and the transaction's now: its claim judged against its run's
    lease (unless ``judge`` is off: ``claim_fenced`` is then False), its record composed
    whole (as stored unless ``whole``); ``lock`` holds the row until COMMIT."""
    found = tx.one(_LOCKED if lock else _SELECT, (judge, *key_params(key)))
    if found is None:
        return None
    now, fenced = found[OPERATION_WIDTH:]
    row = operation_row(
        found[:OPERATION_WIDTH],
        fenced=bool(fenced),
        time=tx.time,
        compose=record_composer(content, partial(read_content, tx), key, whole=whole),
    )
    return row, tx.time(now)


def _first_claim(
    tx: Tx,
    operation: NewOperation,
    plan: InputPlan,
    owner: str,
    ttl: timedelta,
    lease: Lease | None,
    *,
    fenced: bool,
) -> datetime | None:
    """Insert the identity's claimed row and return its expiry; None when it has a row
    already (or, ``fenced``, the lease no longer holds the live run)."""
    if plan.rows:
        write_input(tx, operation.key.run_id, plan)
    values = (
        *key_params(operation.key),
        operation.kind,
        operation.handler_id,
        operation.input_digest,
        plan.input_json,
        owner,
        tx.later(ttl),
        *lease_columns(lease),
        plan.input_parts,
    )
    if fenced and lease is not None:
        created = tx.one(_CLAIM_FENCED, (*values, lease.run_id, lease.owner, lease.token))
    else:
        created = tx.one(_CLAIM_FIRST, values)
    return None if created is None else tx.time(created[0])


def _claim(
    tx: Tx,
    operation: NewOperation,
    plan: InputPlan,
    content: ContentIndex,
    owner: str,
    ttl: timedelta,
    prefix: str,
    lease: Lease | None,
) -> OperationClaim:
    """Claim the identity: its first claim in one statement, else its row locked and
    judged, then the run's fence."""
    key = operation.key
    while True:
        expires = _first_claim(tx, operation, plan, owner, ttl, lease, fenced=True)
        if expires is not None:
            return OperationClaim(True, claimed_row(operation, owner, expires, 1, lease))
        found = _select(tx, key, content, lock=True)
        if found is None:
            if lease is not None:
                check_fence(tx, lease)  # the fence refused the insert: raises
            continue  # the row went meanwhile (released): claim it afresh
        row, now = found
        if operation.claim_blocked_by(row, prefix, now):
            return OperationClaim(False, row)
        reclaimed = tx.one(
            _RECLAIM, (owner, tx.later(ttl), *lease_columns(lease), *key_params(key))
        )
        assert reclaimed is not None, "the row is locked (PostgreSQL) or the only writer's"
        if lease is not None:
            check_fence(tx, lease)  # raising rolls the claim back
        claimed = claimed_row(operation, owner, tx.time(reclaimed[0]), int(reclaimed[1]), lease)
        return OperationClaim(True, claimed)


def _complete(
    tx: Tx,
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
    checked and the ``operation_completed`` event, then the ``log`` entries, are appended
    in the same transaction, so a fenced finish raises with nothing stored."""
    key = operation.key
    record = stored_record(operation, outcome, plan)
    values = (outcome.outcome, record, owner, *lease_columns(lease))
    completed = tx.one(
        _COMPLETE_CLAIMED,
        (
            *values,
            *key_params(key),
            operation.kind,
            operation.handler_id,
            operation.input_digest,
        ),
    )
    if completed is not None:
        attempts = int(completed[0])
    else:
        while True:
            found = _select(tx, key, content, judge=False, lock=True)
            row = None if found is None else found[0]
            if row is not None and operation.blocked_by(row):
                if lease is not None:
                    check_fence(tx, lease)
                return row
            if row is not None:
                tx.execute(_COMPLETE, (*values, *key_params(key)))
                attempts = row.attempts
                break
            created = tx.one(
                _CREATE_COMPLETED,
                (
                    *key_params(key),
                    operation.kind,
                    operation.handler_id,
                    operation.input_digest,
                    plan.input_json,
                    *values,
                    plan.input_parts,
                ),
            )
            if created is not None:
                attempts = 1
                break  # else a concurrent writer created the row: judge it instead
    if plan.rows:
        write_input(tx, key.run_id, plan)
    if lease is not None:  # a fenced append raises, and the transaction is rolled back
        event = completed_event(operation, outcome, event_attempts or attempts)
        write_entries(tx, lease, log, leading=[event])
    return None


def _finish_claiming(
    tx: Tx,
    operation: NewOperation,
    outcome: OperationOutcome,
    plan: InputPlan,
    content: ContentIndex,
    ahead: Sequence[tuple[NewOperation, str, InputPlan]],
    *,
    owner: str,
    ttl: timedelta,
    lease: Lease,
    log: Sequence[LogEntry],
) -> tuple[OperationRow | None, frozenset[OperationKey]]:
    """:func:`_complete`, then a claim on each ``ahead`` identity without a row (the append
    just checked the fence)."""
    blocking = _complete(tx, operation, outcome, plan, content, owner=owner, lease=lease, log=log)
    if blocking is not None:
        return blocking, frozenset()
    claimed = frozenset(
        claim.key
        for claim, claim_owner, claim_plan in ahead
        if _first_claim(tx, claim, claim_plan, claim_owner, ttl, lease, fenced=False) is not None
    )
    return None, claimed


def _renew(tx: Tx, key: OperationKey, owner: str, ttl: timedelta, lease: Lease | None) -> bool:
    """Extend ``owner``'s claim (its row locked before the run's fence is checked)."""
    if lease is not None:
        tx.one(_LOCK, key_params(key))
        if not fence_holds(lambda: check_fence(tx, lease)):
            return False
    return tx.one(_RENEW, (tx.later(ttl), *key_params(key), owner)) is not None


def _count_attempt(
    tx: Tx,
    key: OperationKey,
    content: ContentIndex,
    owner: str,
    ttl: timedelta,
    lease: Lease | None,
) -> OperationRow | None:
    """Count ``owner``'s next attempt, or return the row another owner completed."""
    found = _select(tx, key, content, lock=True)
    if lease is not None:
        check_fence(tx, lease)
    if found is not None and found[0].status == "completed":
        return found[0]
    tx.execute(_COUNT, (tx.later(ttl), *key_params(key), owner))
    return None


class OperationOps(Rules):
    """Claims and records of durable operations, fenced by the run's lease when one is held."""

    _content: ContentIndex  # the store's content cache

    async def get_operation(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, or None."""

        def read(tx: Tx) -> OperationRow | None:
            found = _select(tx, key, self._content)
            return None if found is None else found[0]

        return await self._read_tx(read)

    async def get_operation_as_stored(self, key: OperationKey) -> OperationRow | None:
        """The identity's row, its record as stored (``null`` for an input kept apart)."""

        def read(tx: Tx) -> OperationRow | None:
            found = _select(tx, key, self._content, whole=False)
            return None if found is None else found[0]

        return await self._read_tx(read)

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
        claim = await self._write_tx(
            lambda tx: _claim(tx, operation, plan, self._content, owner, ttl, prefix, lease),
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
        return await self._write_tx(lambda tx: _renew(tx, key, owner, ttl, lease), durable=False)

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
        return await self._write_tx(
            lambda tx: _count_attempt(tx, key, self._content, owner, ttl, lease), durable=False
        )

    async def release_operation_claim(self, key: OperationKey, *, owner: str) -> bool:
        """Drop ``owner``'s claim, leaving no row (its handler's answer was refused)."""
        return await self._write_tx(
            lambda tx: tx.one(_RELEASE, (*key_params(key), owner)) is not None, durable=False
        )

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
        blocking = await self._write_tx(
            lambda tx: _complete(
                tx, operation, outcome, plan, self._content, owner=owner, lease=lease, log=log
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
        result = await self._write_tx(
            lambda tx: _finish_claiming(
                tx,
                operation,
                outcome,
                plan,
                self._content,
                plans,
                owner=owner,
                ttl=ttl,
                lease=lease,
                log=log,
            )
        )
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
        blocking = await self._write_tx(
            lambda tx: _complete(
                tx,
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
