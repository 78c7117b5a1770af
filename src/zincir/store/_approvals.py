"""Approvals a person answers later: the ``approvals`` table.

A paused run opens one row per paused call, with its pause events, under its lease; a call
opened again at another sequence (its next decision round, after its decision no longer
bound the arguments that would run) gets its row replaced. A decision is recorded once per
round, from any process, and in the same transaction sends the run an
``APPROVAL_TOPIC`` message exactly as ``zincir.send_message`` would from outside a run, so
that a ResumeWorker claims a run parked on that topic only once it has a decision.

Concurrency on PostgreSQL: a decision locks the run's row (``FOR SHARE``, so the run cannot
finish meanwhile) and then the approval's (``FOR UPDATE``), the order in which the run's
own writes (its fenced append, then the approval) take them; of two deciders the second
waits and then finds the approval decided (ApprovalDecided). SQLite runs one writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from .._errors import InvalidInput
from .._validate import check_id
from ._approval_checks import (
    approval_not_found,
    check_approval_id,
    check_decidable,
    check_digest,
    check_json_object,
    checked_approvals,
    new_rounds,
)
from ._messages import send, take_messages
from ._records import Lease, NewEvent
from ._restart_records import (
    APPROVAL_COLUMNS,
    APPROVAL_PAYLOADS,
    APPROVAL_TOPIC,
    ApprovalRow,
    NewApproval,
    approval_id,
    approval_row,
    approval_run_id,
    decision_message,
    decision_taker,
)
from ._sql import Rules, Tx, sql

__all__ = ["ApprovalOps", "decide_approval", "open_approvals", "settle_approval"]

_SELECT: Final = f"SELECT {APPROVAL_COLUMNS} FROM approvals"
_BY_ID: Final = sql(  # the run id an approval id names: for the error of a damaged value
    f"{_SELECT} WHERE approval_id = ? AND run_id = ?", opens=APPROVAL_PAYLOADS, run_param=1
)
_OF_CALLS: Final = sql(
    f"{_SELECT} WHERE run_id = ? AND call_id {{in_list}}", opens=APPROVAL_PAYLOADS, run_param=0
)
_ROUNDS: Final = sql(
    "SELECT call_id, sequence FROM approvals WHERE run_id = ? AND call_id {in_list}"
)
_OPEN: Final = sql(
    "INSERT INTO approvals (approval_id, run_id, call_id, tool, arguments, args_sha256, "
    "sequence, execution, requested_at, expires_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, zincir_now(), ?) "
    "ON CONFLICT (run_id, call_id) DO UPDATE SET tool = excluded.tool, "
    "arguments = excluded.arguments, args_sha256 = excluded.args_sha256, "
    "sequence = excluded.sequence, execution = excluded.execution, "
    "requested_at = excluded.requested_at, expires_at = excluded.expires_at, "
    "decision = NULL, decided_at = NULL, edited_args_sha256 = NULL, decided_by = NULL "
    "WHERE approvals.sequence <> excluded.sequence",
    seals=(4,),
)
_OWNER: Final = sql("SELECT run_id FROM approvals WHERE approval_id = ?")
_RUN_STATUS: Final = sql("SELECT status FROM agent_runs WHERE id = ?{for_share}")
_UNDECIDED: Final = sql(
    f"SELECT {APPROVAL_COLUMNS}, expires_at <= zincir_now() FROM approvals "
    "WHERE approval_id = ? AND run_id = ?{for_update}",
    opens=APPROVAL_PAYLOADS,
    run_param=1,
)
_DECIDE: Final = sql(
    "UPDATE approvals SET decision = ?, edited_args_sha256 = ?, decided_by = ?, "
    "decided_at = zincir_now() WHERE approval_id = ? RETURNING decided_at",
    seals=(0,),
)
_SETTLE: Final = sql(
    "UPDATE approvals SET decision = ?, edited_args_sha256 = ?, decided_by = ?, "
    "decided_at = zincir_now() WHERE run_id = ? AND call_id = ? AND decision IS NULL",
    seals=(0,),
)
_SEQUENCE: Final = sql("SELECT sequence FROM approvals WHERE run_id = ? AND call_id = ?")
_LIST: Final = {
    (pending, one_run): sql(
        _SELECT
        + (
            " WHERE decision IS NULL AND run_id IN "
            "(SELECT id FROM agent_runs WHERE status IN ('pending', 'running'))"
            if pending
            else " WHERE TRUE"
        )
        + (" AND run_id = ?" if one_run else "")
        + " ORDER BY requested_at, approval_id{bytewise}",  # bytewise on both
        opens=APPROVAL_PAYLOADS,
        run_param=0 if one_run else None,
    )
    for pending in (False, True)
    for one_run in (False, True)
}

_Signed = tuple[str | None, str | None]
"""A decision's edited arguments' digest and who made it (None: not given)."""


def open_approvals(
    tx: Tx, lease: Lease, approvals: Sequence[NewApproval], events: Sequence[NewEvent]
) -> list[ApprovalRow]:
    """Append ``events`` and open ``approvals``; the stored rows of their calls, in order."""
    tx.append(lease, events)  # the fence (on PostgreSQL the run's row lock: opens go one by one)
    calls = tx.values([new.call_id for new in approvals])
    known: dict[str, int] = dict(tx.all(_ROUNDS, (lease.run_id, calls)))
    tx.executemany(
        _OPEN,
        [
            (
                approval_id(new.run_id, new.call_id),
                new.run_id,
                new.call_id,
                new.tool,
                new.arguments_json,
                new.args_sha256.lower(),
                new.sequence,
                new.execution,
                tx.stamp(new.expires_at),
            )
            for new in approvals
        ],
    )
    for call_id, old in new_rounds(approvals, known):
        _take_wake_ups(tx, lease.run_id, call_id, old)
    found = {}
    for row in tx.all(_OF_CALLS, (lease.run_id, calls)):
        record = approval_row(row, tx.time)
        found[record.call_id] = record
    return [found[new.call_id] for new in approvals]


def _take_wake_ups(tx: Tx, run_id: str, call_id: str, sequence: int) -> None:
    """Take the unreceived decision messages of one call, in the name of its decision round
    (its approval's sequence: a message is received once per taker). The caller appended
    under the run's lease (on PostgreSQL it holds the run's row lock)."""
    take_messages(tx, run_id, APPROVAL_TOPIC, decision_taker(call_id, sequence), call_id=call_id)


def decide_approval(
    tx: Tx, aid: str, decision_json: str, digest: str | None, signed: _Signed = (None, None)
) -> ApprovalRow:
    """Record the decision of approval ``aid`` (with its edited arguments' digest and who
    decided, ``signed``) and message its run; the decided row."""
    owner = tx.one(_OWNER, (aid,))
    if owner is None:
        raise approval_not_found(aid)
    run_id: str = owner[0]
    status = tx.one(_RUN_STATUS, (run_id,))
    stored_row = tx.one(_UNDECIDED, (aid, run_id))
    if stored_row is None:
        raise approval_not_found(aid)
    stored, expired = approval_row(stored_row[:-1], tx.time), bool(stored_row[-1])
    check_decidable(
        stored, expired=expired, digest=digest, run_status=None if status is None else status[0]
    )
    decided = tx.one(_DECIDE, (decision_json, *signed, aid))
    assert decided is not None, "the approval read above is stored"
    send(tx, run_id, APPROVAL_TOPIC, decision_message(stored))
    return replace(
        stored,
        decision_json=decision_json,
        decided_at=tx.time(decided[0]),
        edited_args_sha256=signed[0],
        decided_by=signed[1],
    )


def settle_approval(
    tx: Tx,
    lease: Lease,
    call_id: str,
    decision_json: str,
    events: Sequence[NewEvent],
    signed: _Signed = (None, None),
) -> None:
    """Append ``events``, record the decision on ``call_id`` if nobody did (with ``signed``:
    its edited arguments' digest and who decided), and take the call's wake-up messages."""
    tx.append(lease, events)
    tx.execute(_SETTLE, (decision_json, *signed, lease.run_id, call_id))
    found = tx.one(_SEQUENCE, (lease.run_id, call_id))
    _take_wake_ups(tx, lease.run_id, call_id, 0 if found is None else int(found[0]))


class ApprovalOps(Rules):
    """Open approvals with a pause, list them, and record one decision each."""

    async def open_approvals(
        self, lease: Lease, approvals: Sequence[NewApproval], events: Sequence[NewEvent] = ()
    ) -> list[ApprovalRow]:
        """Append ``events`` (fenced by ``lease``) and open an approval per paused call, in
        one transaction; return the stored rows of those calls, in the given order.

        Opening a call again at the same sequence keeps its row, and any decision already
        recorded on it. At another sequence (a new decision round) it replaces the row: its
        tool, arguments, digest, sequence, execution, request time and expiry, with the
        decision cleared and the old decision's wake-up messages taken.
        """
        batch = checked_approvals(lease, approvals)
        logged = list(events)
        return await self._write_tx(lambda tx: open_approvals(tx, lease, batch, logged))

    async def get_approval(self, approval_id: str) -> ApprovalRow | None:
        """One approval as stored, decided or not; None if there is none."""
        aid = check_approval_id(approval_id)
        run_id = approval_run_id(aid)  # None: no stored approval has this id

        def read(tx: Tx) -> ApprovalRow | None:
            row = tx.one(_BY_ID, (aid, run_id))
            return None if row is None else approval_row(row, tx.time)

        return await self._read_tx(read)

    async def list_approvals(
        self, run_id: str | None = None, *, pending: bool = True
    ) -> list[ApprovalRow]:
        """Approvals by request time (then id), of one run or of all.

        ``pending`` keeps only the undecided ones of live runs (an expired one is still
        listed: its expiry is applied when its run resumes); otherwise every row.
        """
        if run_id is not None:
            check_id(run_id)
        statement = _LIST[pending, run_id is not None]
        params = () if run_id is None else (run_id,)

        def read(tx: Tx) -> list[ApprovalRow]:
            return [approval_row(row, tx.time) for row in tx.all(statement, params)]

        return await self._read_tx(read, offload=run_id is None and not pending)

    async def settle_approval(
        self,
        lease: Lease,
        call_id: str,
        decision_json: str,
        events: Sequence[NewEvent] = (),
        *,
        edited_args_sha256: str | None = None,
        decided_by: str | None = None,
    ) -> None:
        """The run applies its decision on ``call_id``: append ``events`` (fenced), record the
        decision on the call's approval if nobody did, and take the call's wake-up messages,
        in one transaction (so the call is no longer listed, and a later pause of the run is
        not woken by an old decision). ``edited_args_sha256`` and ``decided_by`` are stored
        with a decision recorded here."""
        check_id(call_id, "call_id", run_id=lease.run_id)
        decision = check_json_object(
            decision_json, f"the decision of call {call_id!r}", lease.run_id
        )
        signed = _signed(edited_args_sha256, decided_by, call_id, lease.run_id)
        logged = list(events)
        await self._write_tx(
            lambda tx: settle_approval(tx, lease, call_id, decision, logged, signed)
        )

    async def decide_approval(
        self,
        approval_id: str,
        decision_json: str,
        *,
        args_sha256: str | None = None,
        edited_args_sha256: str | None = None,
        decided_by: str | None = None,
    ) -> ApprovalRow:
        """Record the decision of an undecided, unexpired approval (with the digest of the
        edited arguments it approves, and who made it) and send its run the
        ``APPROVAL_TOPIC`` message, in one transaction; return the decided row.

        ApprovalNotFound, ApprovalDecided (a decision is used once), ApprovalExpired,
        ApprovalMismatch (``args_sha256`` given and not the stored digest), RunTerminal.
        """
        aid = check_approval_id(approval_id)
        run_id = approval_run_id(aid)
        decision = check_json_object(decision_json, f"the decision of approval {aid!r}", run_id)
        digest = None
        if args_sha256 is not None:
            digest = check_digest(args_sha256, f"args_sha256 for approval {aid!r}", run_id)
        signed = _signed(edited_args_sha256, decided_by, aid, run_id)
        return await self._write_tx(lambda tx: decide_approval(tx, aid, decision, digest, signed))


def _signed(edited: str | None, by: str | None, what: str, run_id: str | None) -> _Signed:
    """A decision's edited arguments' digest (lowercase hex) and decider, checked."""
    if edited is not None:
        edited = check_digest(edited, f"edited_args_sha256 for {what!r}", run_id)
    if by is not None and (not isinstance(by, str) or not by or len(by) > 200):
        raise InvalidInput(
            f"decided_by for {what!r} must be a non-empty str of at most 200 characters, "
            f"not {by!r:.80}",
            run_id=run_id,
        )
    return edited, by
