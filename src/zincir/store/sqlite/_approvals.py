"""Approvals a person answers later: the ``approvals`` table.

A paused run opens one row per paused call, with its pause events, under its lease; a call
opened again at another sequence (its next decision round, after its decision no longer
bound the arguments that would run) gets its row replaced. A decision is recorded once per
round, from any process, and in the same transaction sends the run an
``APPROVAL_TOPIC`` message exactly as ``zincir.send_message`` would from outside a run, so
that a ResumeWorker claims a run parked on that topic only once it has a decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import apsw

from ..._json import encode_checked
from ..._time import from_db, to_db
from ..._validate import check_id
from .._approval_checks import (
    approval_not_found,
    check_approval_id,
    check_decidable,
    check_digest,
    check_json_object,
    checked_approvals,
    new_rounds,
)
from .._records import Lease, NewEvent
from .._restart_records import (
    APPROVAL_COLUMNS,
    APPROVAL_TOPIC,
    ApprovalRow,
    NewApproval,
    approval_id,
    approval_row,
    approval_run_id,
    decision_message,
    decision_taker,
)
from ._base import SQLiteBase
from ._log import append
from ._messages import _insert as insert_message
from ._messages import take_messages

__all__ = ["ApprovalOps"]

_SELECT = f"SELECT {APPROVAL_COLUMNS} FROM approvals"
_PENDING = (
    " WHERE decision IS NULL AND run_id IN "
    "(SELECT id FROM agent_runs WHERE status IN ('pending', 'running'))"
)


def _row(row: tuple[Any, ...]) -> ApprovalRow:
    return approval_row(row, from_db)


def _open(
    conn: apsw.Connection,
    lease: Lease,
    now: datetime,
    approvals: Sequence[NewApproval],
    events: Sequence[NewEvent],
) -> list[ApprovalRow]:
    append(conn, lease, now, events)  # the fence: a superseded owner stores nothing
    stamp = to_db(now)
    calls = encode_checked([new.call_id for new in approvals])
    known = dict(
        conn.execute(
            "SELECT call_id, sequence FROM approvals "
            "WHERE run_id = ? AND call_id IN (SELECT value FROM json_each(?))",
            (lease.run_id, calls),
        )
    )
    conn.executemany(
        "INSERT INTO approvals (approval_id, run_id, call_id, tool, arguments, args_sha256, "
        "sequence, execution, requested_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (run_id, call_id) DO UPDATE SET tool = excluded.tool, "
        "arguments = excluded.arguments, args_sha256 = excluded.args_sha256, "
        "sequence = excluded.sequence, execution = excluded.execution, "
        "requested_at = excluded.requested_at, expires_at = excluded.expires_at, "
        "decision = NULL, decided_at = NULL WHERE approvals.sequence <> excluded.sequence",
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
                stamp,
                None if new.expires_at is None else to_db(new.expires_at),
            )
            for new in approvals
        ],
    )
    for call_id, old in new_rounds(approvals, known):
        _take_wake_ups(conn, now, lease.run_id, call_id, old)
    found = {}
    for row in conn.execute(
        f"{_SELECT} WHERE run_id = ? AND call_id IN (SELECT value FROM json_each(?))",
        (lease.run_id, calls),
    ):
        record = _row(row)
        found[record.call_id] = record
    return [found[new.call_id] for new in approvals]


def _take_wake_ups(
    conn: apsw.Connection, now: datetime, run_id: str, call_id: str, sequence: int
) -> None:
    """Take the unreceived decision messages of one call, in the name of its decision round
    (its approval's sequence: a message is received once per taker)."""
    take_messages(
        conn, now, run_id, APPROVAL_TOPIC, decision_taker(call_id, sequence), call_id=call_id
    )


def _decide(
    conn: apsw.Connection, now: datetime, aid: str, decision_json: str, digest: str | None
) -> ApprovalRow:
    row = conn.execute(f"{_SELECT} WHERE approval_id = ?", (aid,)).fetchone()
    if row is None:
        raise approval_not_found(aid)
    stored = _row(row)
    run_id = stored.run_id
    status = conn.execute("SELECT status FROM agent_runs WHERE id = ?", (run_id,)).fetchone()
    check_decidable(
        stored,
        expired=stored.expires_at is not None and stored.expires_at <= now,
        digest=digest,
        run_status=None if status is None else status[0],
    )
    stamp = to_db(now)
    conn.execute(
        "UPDATE approvals SET decision = ?, decided_at = ? WHERE approval_id = ?",
        (decision_json, stamp, aid),
    )
    insert_message(conn, now, run_id, APPROVAL_TOPIC, decision_message(stored), None, None)
    return replace(stored, decision_json=decision_json, decided_at=from_db(stamp))


class ApprovalOps(SQLiteBase):
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
        return await self._write(lambda conn: _open(conn, lease, self.clock(), batch, logged))

    async def get_approval(self, approval_id: str) -> ApprovalRow | None:
        """One approval as stored, decided or not; None if there is none."""
        aid = check_approval_id(approval_id)

        def read(conn: apsw.Connection) -> ApprovalRow | None:
            row = conn.execute(f"{_SELECT} WHERE approval_id = ?", (aid,)).fetchone()
            return None if row is None else _row(row)

        return await self._read(read)

    async def list_approvals(
        self, run_id: str | None = None, *, pending: bool = True
    ) -> list[ApprovalRow]:
        """Approvals by request time (then id), of one run or of all.

        ``pending`` keeps only the undecided ones of live runs (an expired one is still
        listed: its expiry is applied when its run resumes); otherwise every row.
        """
        if run_id is not None:
            check_id(run_id)
        sql = _SELECT + (_PENDING if pending else " WHERE 1")
        params: tuple[str, ...] = ()
        if run_id is not None:
            sql, params = sql + " AND run_id = ?", (run_id,)
        sql += " ORDER BY requested_at, approval_id"

        def read(conn: apsw.Connection) -> list[ApprovalRow]:
            return [_row(row) for row in conn.execute(sql, params)]

        return await self._read(read, offload=run_id is None and not pending)

    async def settle_approval(
        self, lease: Lease, call_id: str, decision_json: str, events: Sequence[NewEvent] = ()
    ) -> None:
        """The run applies its decision on ``call_id``: append ``events`` (fenced), record the
        decision on the call's approval if nobody did, and take the call's wake-up messages,
        in one transaction (so the call is no longer listed, and a later pause of the run is
        not woken by an old decision)."""
        check_id(call_id, "call_id", run_id=lease.run_id)
        decision = check_json_object(
            decision_json, f"the decision of call {call_id!r}", lease.run_id
        )
        logged = list(events)

        def write(conn: apsw.Connection) -> None:
            now = self.clock()
            append(conn, lease, now, logged)
            stamp = to_db(now)
            conn.execute(
                "UPDATE approvals SET decision = ?, decided_at = ? "
                "WHERE run_id = ? AND call_id = ? AND decision IS NULL",
                (decision, stamp, lease.run_id, call_id),
            )
            found = conn.execute(
                "SELECT sequence FROM approvals WHERE run_id = ? AND call_id = ?",
                (lease.run_id, call_id),
            ).fetchone()
            _take_wake_ups(conn, now, lease.run_id, call_id, 0 if found is None else found[0])

        await self._write(write)

    async def decide_approval(
        self, approval_id: str, decision_json: str, *, args_sha256: str | None = None
    ) -> ApprovalRow:
        """Record the decision of an undecided, unexpired approval and send its run the
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
        return await self._write(lambda conn: _decide(conn, self.clock(), aid, decision, digest))
