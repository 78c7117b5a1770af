"""The checks both backends make on approvals: the input of a pause or a decision, and
whether a stored approval may still be decided.

Each raises the error a caller sees (InvalidInput, PayloadTooLarge, ApprovalNotFound,
ApprovalDecided, ApprovalExpired, ApprovalMismatch, RunTerminal) before anything is written,
or inside the write transaction, which then stores nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from .._errors import (
    ApprovalDecided,
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalNotFound,
    InvalidInput,
    PayloadTooLarge,
)
from .._json import MAX_DOCUMENT_BYTES, StrictJsonError, loads_strict
from .._time import to_db
from .._validate import MAX_ID_BYTES, check_id, check_sequence, name_problem, utf8
from ._records import TERMINAL_STATUSES, Lease
from ._restart_records import ApprovalRow, NewApproval, approval_run_id
from ._run_rules import terminal_error

__all__ = [
    "approval_not_found",
    "check_approval_id",
    "check_decidable",
    "check_digest",
    "check_json_object",
    "checked_approvals",
    "new_rounds",
]

_EXECUTIONS: Final = ("approval", "external")
_DIGEST: Final = re.compile("[0-9a-fA-F]{64}")
_MAX_APPROVAL_ID_BYTES: Final = 2 * 3 * MAX_ID_BYTES + 1  # two ids, every byte escaped, one '/'


def check_approval_id(aid: object) -> str:
    """``aid`` if it can name an approval, else InvalidInput."""
    problem = name_problem("an approval id", aid, max_bytes=_MAX_APPROVAL_ID_BYTES)
    if problem is not None:
        raise InvalidInput(problem)
    assert isinstance(aid, str)
    return aid


def check_digest(value: object, what: str, run_id: str | None) -> str:
    """``value`` in lower case if it is a SHA-256 in hexadecimal, else InvalidInput."""
    if not isinstance(value, str) or _DIGEST.fullmatch(value) is None:
        raise InvalidInput(
            f"{what} must be 64 hexadecimal digits (a SHA-256), not {value!r:.80}", run_id=run_id
        )
    return value.lower()


def check_json_object(text: object, what: str, run_id: str | None) -> str:
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


def checked_approvals(lease: Lease, approvals: Sequence[NewApproval]) -> list[NewApproval]:
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
        check_json_object(new.arguments_json, f"the arguments of call {call!r}", run_id)
        check_digest(new.args_sha256, f"args_sha256 of call {call!r}", run_id)
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


def new_rounds(
    approvals: Sequence[NewApproval], stored: Mapping[str, int]
) -> list[tuple[str, int]]:
    """(call id, old sequence) of each call opened at another sequence than its stored
    approval's (``stored``: call id -> sequence): a new decision round, whose old decision
    must not wake the run again."""
    rounds = []
    for new in approvals:
        old = stored.get(new.call_id, new.sequence)
        if old != new.sequence:
            rounds.append((new.call_id, old))
    return rounds


def approval_not_found(aid: str) -> ApprovalNotFound:
    """The error for an approval id that names no stored approval."""
    return ApprovalNotFound(
        f"no approval {aid!r} waits for a decision in this store", run_id=approval_run_id(aid)
    )


def check_decidable(
    stored: ApprovalRow, *, expired: bool, digest: str | None, run_status: str | None
) -> None:
    """Raise unless ``stored`` may be decided now: ApprovalDecided (a decision is used
    once), ApprovalExpired (``expired``: its expiry passed), ApprovalMismatch (``digest``
    given and not the stored one), RunTerminal (its run, ``run_status``, finished)."""
    aid, run_id = stored.approval_id, stored.run_id
    if stored.decided_at is not None:
        raise ApprovalDecided(
            f"approval {aid!r} was already decided at {to_db(stored.decided_at)}; "
            "a decision is used once",
            run_id=run_id,
        )
    if stored.expires_at is not None and expired:
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
    if run_status is not None and run_status in TERMINAL_STATUSES:
        raise terminal_error(run_id, run_status, f"; approval {aid!r} can no longer be decided")
