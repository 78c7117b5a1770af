"""Approvals a person answers later, from any process: list what waits, record a decision.

A paused durable run opens one approval per paused call. ``pending_approvals`` lists the
undecided ones; ``decide`` records a decision once, bound to the arguments' digest, and
wakes the run, which applies it through ``approval_resume`` when it resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._errors import ApprovalNotFound, InvalidInput
from .._json import loads_strict
from .._validate import check_optional_id
from ..contract.payloads import ApprovalDecision
from ..store import ApprovalRow, Store, as_store
from ..store._restart_records import approval_run_id
from ._approval import Approve, Decision, Execution, ExternalResult, as_document
from ._approval import args_sha256 as hash_arguments

__all__ = ["PendingApproval", "decide", "pending_approvals"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One paused call and its approval: what would run, since when it waits, and its
    decision once recorded.

    ``expired`` says the approval passed ``expires_at`` undecided: the call is denied when
    its run resumes, and a decision is refused. ``edited_args_sha256`` is the digest of the
    edited arguments an approval runs the call with (``args_sha256`` stays the model's), and
    ``decided_by`` who decided (None when not said). ``sequence`` is where the decision goes
    through ``approval_resume``: the call's sequence, moved one ``ATTEMPT_STRIDE`` on for
    each time the call was asked again because a decision no longer bound the arguments that
    would run (each such round is decided once, on its own arguments).
    """

    approval_id: str
    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    args_sha256: str
    execution: Execution
    sequence: int
    since: datetime
    expires_at: datetime | None
    expired: bool
    decision: ApprovalDecision | None
    edited_args_sha256: str | None = None
    decided_by: str | None = None

    @classmethod
    def from_row(cls, row: ApprovalRow, now: datetime) -> PendingApproval:
        """The approval ``row`` as seen at ``now``."""
        arguments: dict[str, Any] = loads_strict(row.arguments_json)
        return cls(
            approval_id=row.approval_id,
            run_id=row.run_id,
            call_id=row.call_id,
            tool=row.tool,
            arguments=arguments,
            args_sha256=row.args_sha256,
            execution="external" if row.execution == "external" else "approval",
            sequence=row.sequence,
            since=row.requested_at,
            expires_at=row.expires_at,
            expired=(
                row.decision_json is None and row.expires_at is not None and row.expires_at <= now
            ),
            decision=(
                None if row.decision_json is None else ApprovalDecision.from_json(row.decision_json)
            ),
            edited_args_sha256=row.edited_args_sha256,
            decided_by=row.decided_by,
        )


async def pending_approvals(store: Store, run_id: str | None = None) -> list[PendingApproval]:
    """Every paused call of a live run still waiting for a decision (of ``run_id`` only, if
    given), oldest first; expired ones included, marked ``expired``."""
    as_store(store)
    check_optional_id(run_id, "a run id", run_id=run_id)
    rows = await store.list_approvals(run_id, pending=True)
    now = store.now()
    return [PendingApproval.from_row(row, now) for row in rows]


async def decide(
    store: Store,
    approval_id: str,
    decision: Decision,
    *,
    args_sha256: str | None = None,
    decided_by: str | None = None,
) -> PendingApproval:
    """Record ``decision`` for approval ``approval_id`` once, from any process, and wake its
    run; return the decided approval.

    ``Approve`` and ``Deny`` answer an ``approval`` call; ``ExternalResult`` and ``Deny`` an
    ``external`` one. With ``args_sha256`` the decision holds only for the arguments with
    that digest (ApprovalMismatch otherwise). ``decided_by`` (or ``Approve(decided_by=)``)
    names who decided, stored with the decision.

    An ``Approve`` with edited ``arguments`` is stored as given, with their digest: this
    process has no tool to check them against, so they are checked against the tool's
    schema when the run resumes; if they fail it, the call does not run, the resume raises
    InvalidInput naming the call, and the run stays paused with the call open for a new
    decision. Raises ApprovalNotFound, ApprovalDecided, ApprovalExpired, ApprovalMismatch.
    """
    as_store(store)
    if not isinstance(approval_id, str) or not approval_id:
        raise InvalidInput(f"an approval id must be a non-empty str, not {approval_id!r:.80}")
    row = await store.get_approval(approval_id)
    if row is None:
        raise ApprovalNotFound(
            f"no approval {approval_id!r} in this store", run_id=approval_run_id(approval_id)
        )
    run_id = row.run_id
    document = as_document(decision, run_id=run_id)
    if decided_by is not None:
        if document.decided_by not in (None, decided_by):
            raise InvalidInput(
                f"decided_by={decided_by!r} differs from the decision's "
                f"({document.decided_by!r}); name who decided once",
                run_id=run_id,
            )
        if not isinstance(decided_by, str) or not decided_by:
            raise InvalidInput(
                f"decided_by must be a non-empty str, not {decided_by!r:.80}", run_id=run_id
            )
        if isinstance(decision, Approve):
            document = document.model_copy(update={"decided_by": decided_by})
    if isinstance(decision, ExternalResult) and row.execution != "external":
        raise InvalidInput(
            f"call {row.call_id!r} ({row.tool}) waits for approval: decide it with Approve or "
            "Deny, not ExternalResult",
            run_id=run_id,
        )
    if isinstance(decision, Approve) and row.execution == "external":
        raise InvalidInput(
            f"call {row.call_id!r} ({row.tool}) waits for an external result: decide it with "
            "ExternalResult or Deny, not Approve",
            run_id=run_id,
        )
    try:
        decision_json = document.to_json()
    except InvalidInput as error:  # a lone surrogate in a reason or a result
        raise type(error)(f"the decision is not JSON data: {error.detail}", run_id=run_id) from None
    edited = document.override_arguments
    decided = await store.decide_approval(
        approval_id,
        decision_json,
        args_sha256=args_sha256,
        edited_args_sha256=None if edited is None else hash_arguments(edited),
        decided_by=decided_by or document.decided_by,
    )
    return PendingApproval.from_row(decided, store.now())
