"""The SDK's ``needs_approval`` interruptions as zincir approvals.

A run that ends in interruptions opens one approval per interrupted call, bound to the
SHA-256 of its arguments (``zincir approvals list`` shows them; ``zincir approvals
approve|deny`` or ``zincir.agent.decide`` answer them from any process), and waits. Once
every call is decided, running the run again replays it to the same interruptions and
applies the decisions through the SDK's ``RunState`` (``approve`` / ``reject``). Each
decision goes through an ``openai_agents.approval.resume`` operation at the call's sequence,
so a restart applies the decision on record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agents.items import ToolApprovalItem

from ..._errors import ApprovalMismatch, InputDrift, InvalidInput
from ..._json import dumps
from ...agent._approval import APPROVAL_TOPIC, args_sha256
from ...contract import OperationKind
from ...contract.payloads import ApprovalDecision
from ...store import NewApproval
from ._codec import jsonable
from ._run import RunScope

__all__ = ["APPROVAL_RESUME", "Decided", "decisions_for"]

APPROVAL_RESUME: Final = "openai_agents.approval.resume"


@dataclass(frozen=True, slots=True)
class Decided:
    """One interrupted call and the decision that applies to it."""

    item: ToolApprovalItem
    approve: bool
    reason: str | None


async def decisions_for(scope: RunScope, items: Sequence[ToolApprovalItem]) -> list[Decided] | None:
    """The decisions of ``items``, each persisted by an ``approval.resume`` operation; None
    when some call is undecided: its approval is opened (once) and the run waits for it."""
    run_id = scope.run_id
    calls = [_call(item, run_id) for item in items]
    rows = {row.call_id: row for row in await scope.store.list_approvals(run_id, pending=False)}
    undecided = [call for call in calls if _decision(rows.get(call.call_id)) is None]
    if undecided:
        await _open(scope, [call for call in calls if call.call_id not in rows] or undecided)
        return None
    decided = []
    for item, call in zip(items, calls, strict=True):
        row = rows[call.call_id]
        decision = _decision(row)
        assert decision is not None
        if row.args_sha256 != call.digest:
            raise ApprovalMismatch(
                f"call {call.call_id!r} ({call.tool}) was decided for arguments "
                f"{row.args_sha256[:12]}… but would now run with {call.digest[:12]}…; the "
                "model's call changed since: start a new run id",
                run_id=run_id,
            )
        persisted = await _persist(scope, call, decision)
        if persisted.decision == "approve" and persisted.override_arguments is not None:
            raise InvalidInput(
                f"call {call.call_id!r} ({call.tool}) was approved with edited arguments; the "
                "OpenAI Agents SDK runs an approved call with the model's own arguments. Deny it "
                "with a reason the model can act on instead",
                run_id=run_id,
            )
        approve = persisted.decision == "approve"
        if not approve:
            await _log_denial(scope, call.call_id, persisted.reason)
        decided.append(Decided(item, approve, persisted.reason))
    return decided


async def _log_denial(scope: RunScope, call_id: str, reason: str) -> None:
    """A denied call's answer in the run's log (the tool never runs to give one), once."""
    ctx = scope.ctx
    if ctx is None or call_id not in scope.intents or call_id in scope.logged_results:
        return
    text = f"denied: {reason}" if reason else "denied"
    await ctx.record_tool_result(call_id, text, is_error=True, durable=False)
    scope.logged_results.add(call_id)


@dataclass(frozen=True, slots=True)
class _Call:
    call_id: str
    tool: str
    arguments: dict[str, Any]
    digest: str


def _call(item: ToolApprovalItem, run_id: str) -> _Call:
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInput(
            f"the SDK interrupted the run for a {type(raw).__name__} without a call id; zincir "
            "binds approvals to function tool calls",
            run_id=run_id,
        )
    text = item.arguments or "{}"
    try:
        arguments = json.loads(text)
    except ValueError:
        arguments = {"raw": text}
    if not isinstance(arguments, dict):
        arguments = {"value": arguments}
    arguments = jsonable(arguments)
    return _Call(call_id, item.name or "tool", arguments, args_sha256(arguments))


def _decision(row: Any) -> ApprovalDecision | None:
    if row is None or row.decision_json is None:
        return None
    return ApprovalDecision.from_json(row.decision_json)


async def _open(scope: RunScope, calls: Sequence[_Call]) -> None:
    ctx = scope.ctx
    if ctx is None:
        return
    run_id = scope.run_id
    approvals = [
        NewApproval(
            run_id=run_id,
            call_id=call.call_id,
            tool=call.tool,
            arguments_json=dumps(call.arguments, what="arguments", run_id=run_id),
            args_sha256=call.digest,
            sequence=scope.call_sequence(call.call_id),
            execution="approval",
        )
        for call in calls
    ]
    ctx.check_lease()
    await ctx.store.open_approvals(ctx.lease, approvals)
    # Parked: a worker leaves the run alone until a decision arrives.
    await ctx.store.set_run_wait(ctx.lease, "message", APPROVAL_TOPIC, None)


async def _persist(scope: RunScope, call: _Call, decision: ApprovalDecision) -> ApprovalDecision:
    """The decision on record for ``call``: the first one applied, whatever is proposed now."""
    document = {
        "operation": "approval.resume",
        "call_id": call.call_id,
        "tool": call.tool,
        "args_sha256": call.digest,
    }

    async def body() -> Any:
        return decision.to_dict()

    try:
        value, _, _ = await scope.execute(
            APPROVAL_RESUME,
            scope.call_sequence(call.call_id),
            OperationKind.APPROVAL_RESUME,
            document,
            body,
        )
    except InputDrift:
        raise ApprovalMismatch(
            f"call {call.call_id!r} ({call.tool}) was decided for other arguments than its "
            f"current {call.digest[:12]}…; a decided call keeps its arguments",
            run_id=scope.run_id,
        ) from None
    return ApprovalDecision.from_dict(value)
