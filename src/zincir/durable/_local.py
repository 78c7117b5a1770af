"""LocalRuntime: durable operations on a zincir store.

One ``operations`` row per identity (run_id, step_id, sequence), bound to its input digest::

    absent ──claim──▶ claimed (owner, expires_at, lease) ──finish──▶ completed (record)
                        │  ▲ renewed every claim_ttl/3 while the handler runs
                        └──┘ taken over once expired: its owner died (at least once), or at
                             once when made under a run lease that no longer holds the run

In one process, concurrent calls for one identity queue behind an in-flight map, so one of
them runs the handler and the others receive its record. Across processes the claim decides:
a live claim held elsewhere is polled until its record appears or it expires. A claim made
under a run's lease carries its fencing token: once a new owner holds the run (the lease
expired, or ``force_recover``), or the run finished, the claim is dead at once and is taken
over on the next poll, so a restarted agent waits for the run's lease, never a second time
for each operation's claim. A completed record is never replaced: whoever finishes second
returns the record stored first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from .. import _deadlines as deadlines
from .. import _telemetry as telemetry
from .._crash import crash_point
from .._errors import (
    DigestMismatch,
    DuplicateToolCall,
    InputDrift,
    InvalidInput,
    InvalidInvocation,
    StoreError,
    UnknownToolCall,
)
from .._json import MAX_DOCUMENT_BYTES, checked_size
from .._replay import operation_item, replay_for
from .._validate import DEFAULT_POLL_INTERVAL, check_count, check_positive_duration
from ..contract import (
    Failure,
    Invocation,
    Outcome,
    Record,
)
from ..contract._codec import decode_record_for, record_without_input
from ..store import (
    Lease,
    LogEntry,
    NewOperation,
    OperationKey,
    OperationRow,
    Store,
    as_store,
    new_owner_id,
)
from ._operations import new_operation, stored_outcome
from ._registry import Handler, HandlerRegistry, attempt_outcome
from ._retry import RetryPolicy, failure_retry_after

__all__ = ["DEFAULT_CLAIM_TTL", "DEFAULT_POLL_INTERVAL", "DEFAULT_RETRY", "LocalRuntime"]

DEFAULT_RETRY: Final = RetryPolicy()
DEFAULT_CLAIM_TTL: Final = timedelta(seconds=30)


class LocalRuntime:
    """A DurableRuntime on a zincir store: at most one record per invocation identity.

    ``max_input_bytes`` bounds an invocation's input (16 MiB, the largest document zincir
    stores: a long conversation's content is stored once, so its requests may grow past
    the 1 MiB a bare invocation allows; None lifts it).
    ``retry`` retries retryable failures in place before one is persisted; ``claim_ttl``
    bounds how long a dead process's claim made without a lease blocks others (it is renewed
    while the handler runs); ``poll_interval`` is how often a waiter looks for another
    process's record (or for the run's new owner that frees a leased claim).
    A sync handler runs on the event loop and blocks renewal: keep it under ``claim_ttl``.

    Only a lease holder writes a run's log. When a context of this process holds the lease
    of the invocation's run (``store.lease_for(run_id)`` as the execution starts), the
    claim checks that lease's fence and records it, and the record is stored together with
    an ``operation_completed`` event appended under it; if the run was taken over (or
    finished) meanwhile, ``execute`` raises FencedOut (RunTerminal) and stores nothing, no
    record and no event. Such a claim passes to the run's next owner at once (it no longer
    waits for ``claim_ttl``), who runs the handler again (at least once). Without such a
    lease the claim lives until it expires, the record is stored in the ``operations``
    table, which dedupes, and no run's log is written.
    """

    def __init__(
        self,
        store: Store,
        registry: HandlerRegistry,
        retry: RetryPolicy = DEFAULT_RETRY,
        *,
        claim_ttl: timedelta | float = DEFAULT_CLAIM_TTL,
        max_input_bytes: int | None = MAX_DOCUMENT_BYTES,
        poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        as_store(store)
        if not isinstance(registry, HandlerRegistry):
            raise InvalidInput(f"registry must be a HandlerRegistry, not {type(registry).__name__}")
        if not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry must be a RetryPolicy, not {type(retry).__name__}")
        self.store = store
        self.registry = registry
        self.retry = retry
        self.claim_ttl = check_positive_duration(claim_ttl, "claim_ttl")
        self.poll_interval = check_positive_duration(poll_interval, "poll_interval")
        self.max_input_bytes = (
            None if max_input_bytes is None else check_count(max_input_bytes, "max_input_bytes")
        )
        self.owner = new_owner_id()
        self._executions = itertools.count(1)
        self._inflight: dict[str, asyncio.Future[Record | None]] = {}
        self._ahead: dict[str, _Ahead] = {}

    async def execute(self, invocation: Invocation, *, inline: Handler | None = None) -> Record:
        """The terminal record of ``invocation``: the stored one on replay, else run and stored.

        ``inline`` is an in-process callable ``(invocation, request) -> output`` (sync or
        async) used instead of the registered handler; only its record is stored.
        """
        record, _ = await self._shared(invocation, inline, None)
        return record

    async def execute_and_log(
        self,
        invocation: Invocation,
        log: Callable[[Record], Sequence[LogEntry]],
        *,
        ahead: Callable[[Record], Sequence[Invocation]] | None = None,
    ) -> tuple[Record, bool]:
        """:meth:`execute`, and when this call stores the record, the entries ``log(record)``
        appended to the run's log in the same transaction; True when they were.

        For an agent loop that logs what each record holds (a response, a tool result)
        while it holds the run's lease here: one commit instead of two. The entries are
        not written (False) on a replay, without the run's lease, or when they do not fit
        the log (a call id already used in the run): the caller logs them itself then.

        ``ahead(record)`` names the invocations the record says run next (a response's
        tool calls): their claims commit with the record, so executing each of them later
        needs no claim commit of its own. A claim ahead that is not executed with that same
        input is released (:meth:`release_ahead`), never run.
        """
        return await self._shared(invocation, None, log, ahead)

    async def release_ahead(self, invocations: Iterable[Invocation]) -> None:
        """Release the claims made ahead for ``invocations`` that were not executed (the
        loop stopped before them); best effort, as a claim of a released lease is dead."""
        for invocation in invocations:
            claimed = self._ahead.pop(invocation.stable_key(), None)
            if claimed is None:
                continue
            with contextlib.suppress(StoreError):
                await self.store.release_operation_claim(claimed.operation.key, owner=claimed.owner)

    async def _shared(
        self,
        invocation: Invocation,
        inline: Handler | None,
        log: Callable[[Record], Sequence[LogEntry]] | None,
        ahead: Callable[[Record], Sequence[Invocation]] | None = None,
    ) -> tuple[Record, bool]:
        """Check the identity against the run's log when this process holds the run's lease
        (VersionDivergence before anything else), then :meth:`_once`."""
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
        lease = self.store.lease_for(invocation.run_id)
        replay = None if lease is None else replay_for(lease)
        if replay is None or replay.settled:
            return await self._once(invocation, inline, log, ahead, new_work=replay is not None)
        async with replay.request(operation_item(invocation.step_id, invocation.sequence)):
            return await self._once(invocation, inline, log, ahead, new_work=False)

    async def _once(
        self,
        invocation: Invocation,
        inline: Handler | None,
        log: Callable[[Record], Sequence[LogEntry]] | None,
        ahead: Callable[[Record], Sequence[Invocation]] | None,
        *,
        new_work: bool,
    ) -> tuple[Record, bool]:
        """One execution per identity in this process; concurrent callers share its record
        (their log entries unwritten)."""
        operation = new_operation(invocation)
        key = invocation.stable_key()
        while (running := self._inflight.get(key)) is not None:
            await asyncio.wait({running})
            shared = running.result()
            if shared is not None and shared.invocation == invocation:
                return shared, False
        done: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = done
        result: Record | None = None
        try:
            result, logged = await self._execute(
                invocation, operation, inline, log, ahead, new_work, key
            )
            return result, logged
        finally:
            del self._inflight[key]
            done.set_result(result)

    # -- one execution ------------------------------------------------------------------

    async def _execute(
        self,
        inv: Invocation,
        operation: NewOperation,
        inline: Handler | None,
        log: Callable[[Record], Sequence[LogEntry]] | None,
        ahead: Callable[[Record], Sequence[Invocation]] | None,
        new_work: bool,
        key: str,
    ) -> tuple[Record, bool]:
        """Replay the stored record, or claim the identity and run it. ``new_work`` (the
        run's log under this lease holds nothing more to replay) skips the first read: the
        claim's own transaction finds any row there is. An identity claimed ahead with
        this input under this lease runs at once; claimed for other input, it is released
        and claimed again."""
        early = self._ahead.get(key)
        if early is not None:
            lease = self.store.lease_for(inv.run_id)
            if early.operation.input_digest == operation.input_digest and early.lease == lease:
                handler = inline if inline is not None else self.registry.require(inv)
                del self._ahead[key]
                crash_point("operation.claimed")
                return await self._run(inv, operation, handler, early.owner, lease, log, ahead)
            del self._ahead[key]
            await self.store.release_operation_claim(operation.key, owner=early.owner)
        # A replay holds the invocation: its record is read without the stored input, bound
        # to it by the input digest (an input that drifted differs in digest).
        row = None if new_work else await self.store.get_operation_as_stored(operation.key)
        if row is not None:
            _check_same(row, inv, operation)
            if row.status == "completed":
                return _decode(row.record, inv), False
        handler = inline if inline is not None else self.registry.require(inv)
        owner = f"{self.owner}/{next(self._executions)}"
        lease = self.store.lease_for(inv.run_id)
        claimed = await self._acquire(inv, operation, owner, row, lease)
        if isinstance(claimed, Record):
            return claimed, False
        crash_point("operation.claimed")
        return await self._run(inv, operation, handler, owner, lease, log, ahead)

    async def _acquire(
        self,
        inv: Invocation,
        operation: NewOperation,
        owner: str,
        row: OperationRow | None,
        lease: Lease | None,
    ) -> Record | int:
        """Claim the identity (its attempt number), or the record another owner stored."""
        mine = self.owner + "/"
        while True:
            if row is None or not row.held_elsewhere(mine, self.store.now()):
                claim = await self.store.claim_operation(
                    operation, owner=owner, ttl=self.claim_ttl, owner_prefix=mine, lease=lease
                )
                if claim.claimed:
                    return claim.row.attempts
                _check_same(claim.row, inv, operation)
                if claim.row.status == "completed":
                    return _decode(claim.row.record, inv)
            await asyncio.sleep(self.poll_interval.total_seconds())
            row = await self.store.get_operation(operation.key)
            if row is not None:
                _check_same(row, inv, operation)
                if row.status == "completed":
                    return _decode(row.record, inv)

    async def _run(
        self,
        inv: Invocation,
        operation: NewOperation,
        handler: Handler,
        owner: str,
        lease: Lease | None,
        log: Callable[[Record], Sequence[LogEntry]] | None,
        ahead: Callable[[Record], Sequence[Invocation]] | None,
    ) -> tuple[Record, bool]:
        """Run the attempts under a renewed claim, then store the record (fenced), with
        its log entries when it has any and the claims of what it says runs next."""
        loop = asyncio.get_running_loop()
        renewals: list[asyncio.Task[None]] = []
        timer = loop.call_later(
            self.claim_ttl.total_seconds() / 3,
            lambda: renewals.append(loop.create_task(self._renew(operation.key, owner, lease))),
        )
        try:
            try:
                result = await self._attempts(inv, operation.key, handler, owner, lease)
            finally:
                timer.cancel()
                for renewal in renewals:
                    renewal.cancel()
                if renewals:
                    await asyncio.wait(renewals)
        except (DigestMismatch, InputDrift):
            await self.store.release_operation_claim(operation.key, owner=owner)
            raise
        if isinstance(result, Record):
            return result, False
        crash_point("operation.handled")
        record = Record.for_invocation(inv, result)  # attempt_outcome validated this pair
        # The store keeps the input once, beside the record: it is not encoded again here.
        outcome = stored_outcome(record, checked_size(record_without_input(record), what="record"))
        entries: Sequence[LogEntry] = ()
        following: list[_Ahead] = []
        if log is not None and lease is not None:
            try:
                entries = log(record)
            except Exception:  # the record is stored regardless; the caller logs the
                entries = ()  # entries itself and meets the error there
            if ahead is not None:
                following = self._ahead_claims(ahead, record, lease)
        try:
            if following and lease is not None:
                stored, claimed = await self.store.finish_operation_claiming(
                    operation,
                    outcome,
                    [(claim.operation, claim.owner) for claim in following],
                    owner=owner,
                    ttl=self.claim_ttl,
                    lease=lease,
                    log=entries,
                )
                for claim in following:
                    if claim.operation.key in claimed:
                        self._ahead[claim.key] = claim
            else:
                stored = await self.store.finish_operation(
                    operation, outcome, owner=owner, lease=lease, log=entries
                )
        except (DuplicateToolCall, UnknownToolCall):
            if not entries:
                raise
            entries = ()
            stored = await self.store.finish_operation(operation, outcome, owner=owner, lease=lease)
        crash_point("operation.recorded")
        if stored is None:
            return record, bool(entries)
        _check_same(stored, inv, operation)
        return _decode(stored.record, inv), False

    def _ahead_claims(
        self, ahead: Callable[[Record], Sequence[Invocation]], record: Record, lease: Lease
    ) -> list[_Ahead]:
        """The valid invocations of the run that ``ahead(record)`` names and nothing of this
        runtime runs or holds yet, each with the owner of its claim."""
        try:
            following = list(ahead(record))
        except Exception:  # claims ahead save a commit; without them each claims its own
            return []
        claims: list[_Ahead] = []
        for invocation in following:
            if not isinstance(invocation, Invocation) or invocation.run_id != lease.run_id:
                continue
            try:
                invocation.validate(self.max_input_bytes)
            except InvalidInvocation:
                continue
            key = invocation.stable_key()
            if key in self._inflight or key in self._ahead:
                continue
            operation = new_operation(invocation)
            owner = f"{self.owner}/{next(self._executions)}"
            claims.append(_Ahead(key, operation, owner, lease))
        return claims

    async def _attempts(
        self,
        inv: Invocation,
        key: OperationKey,
        handler: Handler,
        owner: str,
        lease: Lease | None,
    ) -> Outcome | Record:
        """Retry retryable failures in place under the RetryPolicy; the last outcome wins.
        A failure naming the provider's ``Retry-After`` is recorded at once: the in-place
        delays would not wait it, the caller's durable delay does."""
        attempt = 1
        while True:
            if lease is not None and (lapsed := deadlines.lapsed(lease)):
                raise lapsed  # a starved loop: another owner may be running this already
            if telemetry.tracer() is None:  # no tracing: the handler alone
                outcome = await attempt_outcome(handler, inv)
            else:
                with telemetry.operation(inv) as span:  # a real execution: never a replay
                    outcome = await attempt_outcome(handler, inv)
                    span.outcome(outcome)
            retry = (
                isinstance(outcome, Failure)
                and outcome.retryable
                and failure_retry_after(outcome.message) is None
            )
            if not retry or attempt >= self.retry.max_attempts:
                return outcome
            await asyncio.sleep(self.retry.delay(attempt).total_seconds())
            attempt += 1
            stored = await self.store.count_operation_attempt(
                key, owner=owner, ttl=self.claim_ttl, lease=lease
            )
            if stored is not None:
                return _decode(stored.record, inv)

    async def _renew(self, key: OperationKey, owner: str, lease: Lease | None) -> None:
        """Extend the claim now and every claim_ttl/3 after, until cancelled or lost."""
        while True:
            try:
                held = await self.store.renew_operation_claim(
                    key, owner=owner, ttl=self.claim_ttl, lease=lease
                )
            except StoreError:
                held = True  # a busy or closing store; the fenced final write decides
            if not held:
                return
            await asyncio.sleep(self.claim_ttl.total_seconds() / 3)


@dataclass(frozen=True, slots=True)
class _Ahead:
    """A claim committed with an earlier record, for the invocation with this stable key."""

    key: str
    operation: NewOperation
    owner: str
    lease: Lease


def _decode(text: str | None, inv: Invocation) -> Record:
    if text is None:
        raise StoreError(
            f"operation {inv.stable_key()} is completed but holds no record; the row was "
            "edited outside zincir",
            run_id=inv.run_id,
        )
    record = decode_record_for(text, inv)
    if record.invocation != inv:
        raise StoreError(
            f"the stored record of operation {inv.stable_key()} belongs to another "
            "invocation; the row was edited outside zincir",
            run_id=inv.run_id,
        )
    return record


def _check_same(row: OperationRow, inv: Invocation, operation: NewOperation) -> None:
    """A known identity must arrive with its recorded input, kind and handler."""
    key = inv.stable_key()
    if row.input_digest != operation.input_digest:
        raise InputDrift(
            f"operation {key} was recorded with input {row.input_digest} but arrived with "
            f"{operation.input_digest}; an identity's input never changes (use a new "
            "sequence for new input)",
            run_id=inv.run_id,
        )
    if (row.kind, row.handler_id) != (operation.kind, operation.handler_id):
        raise InputDrift(
            f"operation {key} was recorded for {row.kind}/{row.handler_id} but arrived for "
            f"{operation.kind}/{inv.handler_id}; an identity's kind and handler never change",
            run_id=inv.run_id,
        )
