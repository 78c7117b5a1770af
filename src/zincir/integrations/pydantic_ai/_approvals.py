"""Decisions for the deferred calls a continuation resumes (``agent.run(message_history=...,
deferred_tool_results=...)``), each routed through an ``approval_resume`` operation at the
call's position in the model response, so that a restart applies the decision on record.

The operation's input names the call and the SHA-256 of its arguments (``args_sha256``, as
zincir.agent computes it); the proposal reaches it out of band and its output, the persisted
decision, is what runs. An approval binds the digest of the arguments it lets run (the
override's when given): a later proposal that would run other arguments, or a call whose
arguments changed since, raises ApprovalMismatch before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.tools import DeferredToolResults, ToolApproved, ToolDenied
from pydantic_core import to_jsonable_python

from ..._errors import ApprovalMismatch, InputDrift, InvalidInput
from ...agent._approval import args_sha256
from ...contract import Invocation, OperationKind, Success
from ._identity import canonical, handler_id, step_id
from ._run import RunScope

if TYPE_CHECKING:
    from ._capability import ZincirDurability

__all__ = ["apply_decisions"]

Decision = dict[str, Any]


async def apply_decisions(
    durability: ZincirDurability[Any],
    scope: RunScope,
    messages: Sequence[ModelMessage],
    results: DeferredToolResults,
) -> DeferredToolResults:
    """``results`` with each decision replaced by the persisted one (the first proposal's)."""
    calls = _open_calls(messages)
    applied = DeferredToolResults(metadata=results.metadata, answered_by=results.answered_by)
    for call_id, approval in results.approvals.items():
        if call_id not in calls:
            applied.approvals[call_id] = approval  # pydantic-ai refuses it with its own error
            continue
        position, call = calls[call_id]
        proposed = _approval(call, approval, scope.run_id)
        decision = await _decide(durability, scope, position, call, proposed)
        if decision["decision"] == "approve":
            applied.approvals[call_id] = ToolApproved(override_args=decision["override_arguments"])
        else:
            applied.approvals[call_id] = ToolDenied(str(decision["reason"]))
    for call_id, value in results.calls.items():
        if call_id not in calls:
            applied.calls[call_id] = value
            continue
        position, call = calls[call_id]
        proposed = {"decision": "external_result", "result": _jsonable(value)}
        proposed["args_sha256"] = _digest(call.args_as_dict(), scope.run_id)
        decision = await _decide(durability, scope, position, call, proposed)
        same = decision["result"] == proposed["result"]
        applied.calls[call_id] = value if same else decision["result"]
    return applied


def _approval(call: ToolCallPart, approval: object, run_id: str) -> Decision:
    """The decision document of a proposed approval, with the digest of what it lets run."""
    arguments = call.args_as_dict()
    if approval is True or isinstance(approval, ToolApproved):
        override = approval.override_args if isinstance(approval, ToolApproved) else None
        runs = arguments if override is None else override
        return {
            "decision": "approve",
            "override_arguments": None if override is None else _jsonable(override),
            "args_sha256": _digest(runs, run_id),
        }
    reason = approval.message if isinstance(approval, ToolDenied) else ToolDenied().message
    return {"decision": "deny", "reason": reason, "args_sha256": _digest(arguments, run_id)}


async def _decide(
    durability: ZincirDurability[Any],
    scope: RunScope,
    position: int,
    call: ToolCallPart,
    proposed: Decision,
) -> Decision:
    """Run ``approval.resume`` for ``call``; the persisted decision, refused if the proposal
    is an approval of other arguments than the approval on record."""
    run_id = scope.run_id
    execution = "external" if proposed["decision"] == "external_result" else "approval"
    document = {
        "operation": "approval.resume",
        "tool_call_id": call.tool_call_id,
        "tool": call.tool_name,
        "args_sha256": _digest(call.args_as_dict(), run_id),
        "execution": execution,
    }
    invocation = Invocation(
        run_id=run_id,
        step_id=step_id(scope.agent, "approval.resume"),
        sequence=position,
        kind=OperationKind.APPROVAL_RESUME,
        handler_id=handler_id(scope.agent),
        input_json=canonical(document),
    )

    async def persist(invocation: Invocation, request: Any) -> Any:
        return {"value": proposed}

    backend = durability.get_durable_operation_backend()
    try:
        record = await backend.run_unit(scope, invocation, persist)
    except InputDrift:
        raise ApprovalMismatch(
            f"call {call.tool_call_id!r} ({call.tool_name}) was decided for other arguments "
            f"than its current {document['args_sha256']}; a decided call keeps its arguments",
            run_id=run_id,
        ) from None
    assert isinstance(record.outcome, Success)
    decision: Decision = json.loads(record.outcome.output_json)["value"]
    if (
        proposed["decision"] == decision["decision"] == "approve"
        and proposed["args_sha256"] != decision["args_sha256"]
    ):
        raise ApprovalMismatch(
            f"call {call.tool_call_id!r} ({call.tool_name}) was approved for arguments "
            f"{decision['args_sha256']} but would now run with {proposed['args_sha256']}; "
            "an approval holds only for the arguments it was given",
            run_id=run_id,
        )
    return decision


def _open_calls(messages: Sequence[ModelMessage]) -> dict[str, tuple[int, ToolCallPart]]:
    """The tool calls of the last model response, by id, with their positions."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return {call.tool_call_id: (n, call) for n, call in enumerate(message.tool_calls)}
    return {}


def _digest(arguments: Mapping[str, Any], run_id: str) -> str:
    try:
        return args_sha256(_jsonable(arguments))
    except ValueError as error:
        raise InvalidInput(f"tool arguments are not JSON data: {error}", run_id=run_id) from None


def _jsonable(value: object) -> Any:
    return to_jsonable_python(value, fallback=repr, bytes_mode="base64")
