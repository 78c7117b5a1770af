"""Approvals a person answers later: the ``approvals`` table.

A paused run opens one row per paused call, with its pause events, under its lease; a call
opened again at another sequence (its next decision round, after its decision no longer
bound the arguments that would run) gets its row replaced. A decision is recorded once per
round, from any process, and in the same transaction sends the run an
``APPROVAL_TOPIC`` message exactly as ``zincir.send_message`` would from outside a run, so
that a ResumeWorker claims a run parked on that topic only once it has a decision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import apsw

from ..._errors import (
    ApprovalDecided,
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalNotFound,
    InvalidInput,
    PayloadTooLarge,
    RunTerminal,
)
from ..._json import MAX_DOCUMENT_BYTES, StrictJsonError, encode_checked, loads_strict
from ..._time import from_db, to_db
from ..._validate import MAX_ID_BYTES, check_id, check_sequence, name_problem, utf8
from .._records import TERMINAL_STATUSES, Lease, NewEvent
from .._restart_records import (
    APPROVAL_TOPIC,
    ApprovalRow,
    NewApproval,
    approval_id,
    approval_run_id,
)
from ._base import SQLiteBase
from ._log import append
from ._messages import _insert as insert_message
from ._messages import take_messages

__all__ = ["ApprovalOps"]

_COLUMNS = (
    "approval_id, run_id, call_id, tool, arguments, args_sha256, sequence, execution, "
    "requested_at, expires_at, decision, decided_at"
)
_SELECT = f"SELECT {_COLUMNS} FROM approvals"
_PENDING = (
    " WHERE decision IS NULL AND run_id IN "
    "(SELECT id FROM agent_runs WHERE status IN ('pending', 'running'))"
)
_EXECUTIONS = ("approval", "external")
_DIGEST = re.compile("[0-9a-fA-F]{64}")
_MAX_APPROVAL_ID_BYTES = 2 * 3 * MAX_ID_BYTES + 1  # two ids, every byte escaped, one '/'


def _row(row: tuple[Any, ...]) -> ApprovalRow:
    aid, run, call, tool, arguments, digest, seq, execution, asked, expires, decision, at = row
    return ApprovalRow(
        approval_id=aid,
        run_id=run,
        call_id=call,
        tool=tool,
        arguments_json=arguments,
        args_sha256=digest,
        sequence=int(seq),
        execution=execution,
        requested_at=from_db(asked),
        expires_at=None if expires is None else from_db(expires),
        decision_json=decision,
        decided_at=None if at is None else from_db(at),
    )


def _check_approval_id(aid: object) -> str:
    problem = name_problem("an approval id", aid, max_bytes=_MAX_APPROVAL_ID_BYTES)
    if problem is not None:
        raise InvalidInput(problem)
    assert isinstance(aid, str)
    return aid


def _check_digest(value: object, what: str, run_id: str | None) -> str:
    if not isinstance(value, str) or _DIGEST.fullmatch(value) is None:
        raise InvalidInput(
            f"{what} must be 64 hexadecimal digits (a SHA-256), not {value!r:.80}", run_id=run_id
        )
    return value.lower()


def _check_object(text: object, what: str, run_id: str | None) -> str:
    """``text`` if it is one strict JSON object within the document size limit."""
    if not isinstance(text, str) or utf8(text) is None:
        raise InvalidInput(f"{what} must be JSON text (valid UTF-8)", run_id=run_id)
    if len(text) > MAX_DOCUMENT_BYTES // 4 and len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(
            f"{what} is over the {MAX_DOCUMENT_BYTES:,}-byte limit", run_id=run_id
        )
    try:
        value = loads_strict(text)
    except StrictJsonError as error:
        raise InvalidInput(f"{what} is not strict JSON: {error}", run_id=run_id) from None
    if not isinstance(value, dict):
        raise InvalidInput(
            f"{what} must be a JSON object, not {type(value).__name__}", run_id=run_id
        )
    return text


def _checked(lease: Lease, approvals: Sequence[NewApproval]) -> list[NewApproval]:
    """The approvals to open for ``lease``'s run, else InvalidInput naming the problem."""
    run_id = lease.run_id
    checked: list[NewApproval] = []
    seen: set[str] = set()
    for new in approvals:
        if not isinstance(new, NewApproval):
            raise InvalidInput(f"expected NewApproval, got {type(new).__name__}", run_id=run_id)
        if new.run_id != run_id:
            raise InvalidInput(
                f"an approval of run {new.run_id!r} cannot be opened under this run's lease",
                run_id=run_id,
            )
        call = check_id(new.call_id, "a call id", run_id=run_id)
        if call in seen:
            raise InvalidInput(f"call {call!r} is opened twice in one pause", run_id=run_id)
        seen.add(call)
        check_id(new.tool, "a tool name", run_id=run_id)
        _check_object(new.arguments_json, f"the arguments of call {call!r}", run_id)
        _check_digest(new.args_sha256, f"args_sha256 of call {call!r}", run_id)
        check_sequence(new.sequence, f"the sequence of call {call!r}", run_id=run_id)
        if new.execution not in _EXECUTIONS:
            raise InvalidInput(
                f"execution of call {call!r} is 'approval' or 'external', not {new.execution!r}",
                run_id=run_id,
            )
        if new.expires_at is not None:
            if not isinstance(new.expires_at, datetime):
                raise InvalidInput(f"expires_at of call {call!r} is not a datetime", run_id=run_id)
            to_db(new.expires_at)  # InvalidInput for a naive datetime
        checked.append(new)
    return checked


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
    for new in approvals:
        old = known.get(new.call_id, new.sequence)
        if old != new.sequence:  # a new round: the old decision must not wake the run again
            _take_wake_ups(conn, now, lease.run_id, new.call_id, old)
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
    taker = f"{APPROVAL_TOPIC}:{call_id}:{sequence}"
    take_messages(conn, now, run_id, APPROVAL_TOPIC, taker, call_id=call_id)


def _decide(
    conn: apsw.Connection, now: datetime, aid: str, decision_json: str, digest: str | None
) -> ApprovalRow:
    row = conn.execute(f"{_SELECT} WHERE approval_id = ?", (aid,)).fetchone()
    if row is None:
        raise ApprovalNotFound(
            f"no approval {aid!r} waits for a decision in this store", run_id=approval_run_id(aid)
        )
    stored = _row(row)
    run_id = stored.run_id
    if stored.decided_at is not None:
        raise ApprovalDecided(
            f"approval {aid!r} was already decided at {to_db(stored.decided_at)}; "
            "a decision is used once",
            run_id=run_id,
        )
    if stored.expires_at is not None and stored.expires_at <= now:
        raise ApprovalExpired(
            f"approval {aid!r} expired at {to_db(stored.expires_at)} before a decision; "
            "the call is denied",
            run_id=run_id,
        )
    if digest is not None and digest != stored.args_sha256:
        raise ApprovalMismatch(
            f"approval {aid!r} binds arguments with sha256 {stored.args_sha256}, not {digest}; "
            "list the approvals again and decide on the arguments that would run",
            run_id=run_id,
        )
    status = conn.execute("SELECT status FROM agent_runs WHERE id = ?", (run_id,)).fetchone()
    if status is not None and status[0] in TERMINAL_STATUSES:
        raise RunTerminal(
            f"the run is {status[0]}; approval {aid!r} can no longer be decided", run_id=run_id
        )
    stamp = to_db(now)
    conn.execute(
        "UPDATE approvals SET decision = ?, decided_at = ? WHERE approval_id = ?",
        (decision_json, stamp, aid),
    )
    body = encode_checked({"approval_id": aid, "call_id": stored.call_id})
    insert_message(conn, now, run_id, APPROVAL_TOPIC, body, None, None)
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
        batch = _checked(lease, approvals)
        logged = list(events)
        return await self._write(lambda conn: _open(conn, lease, self.clock(), batch, logged))

    async def get_approval(self, approval_id: str) -> ApprovalRow | None:
        """One approval as stored, decided or not; None if there is none."""
        aid = _check_approval_id(approval_id)

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
        decision = _check_object(decision_json, f"the decision of call {call_id!r}", lease.run_id)
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
        aid = _check_approval_id(approval_id)
        run_id = approval_run_id(aid)
        decision = _check_object(decision_json, f"the decision of approval {aid!r}", run_id)
        digest = None
        if args_sha256 is not None:
            digest = _check_digest(args_sha256, f"args_sha256 for approval {aid!r}", run_id)
        return await self._write(lambda conn: _decide(conn, self.clock(), aid, decision, digest))
