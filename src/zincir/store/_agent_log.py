"""What an agent loop's writes put in a run's log, on every backend: the events of its
entries (responses with their tool intents, tool results) and of its semantic checkpoints,
and the errors of an entry or a decision that does not fit the log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import CheckpointError, DuplicateToolCall, UnknownToolCall
from .._json import dumps, encode_checked
from ._records import CheckpointRecord, LogEntry, NewEvent, ResponseEntry

__all__ = [
    "already_decided",
    "checkpoint_decision",
    "duplicate_intent",
    "entry_events",
    "proposed_checkpoint",
    "result_error",
]


def entry_events(
    run_id: str,
    entries: Sequence[LogEntry],
    leading: Sequence[NewEvent],
    close_intent: Callable[[str], None],
) -> tuple[list[NewEvent], dict[str, int]]:
    """``leading``, then each entry's events (a response's ``llm_call`` and ``tool_call``
    intents, a ``tool_result``), and the intents of these entries left open (call id ->
    index of its event).

    A result answering an intent of earlier entries calls ``close_intent`` with its call id
    (which raises when there is nothing to close); DuplicateToolCall for a result given
    twice among these entries.
    """
    events = list(leading)
    opened: dict[str, int] = {}  # intents of these entries still open: call id -> index
    answered: set[str] = set()
    for entry in entries:
        if isinstance(entry, ResponseEntry):
            events.append(NewEvent("llm_call", entry.response_json))
            for call_id, body in entry.intents:
                opened[call_id] = len(events)
                events.append(NewEvent("tool_call", body, call_id))
            continue
        call_id = entry.call_id
        if call_id in answered:
            raise result_error(call_id, run_id, has_intent=True)
        if opened.pop(call_id, None) is None:
            close_intent(call_id)
        answered.add(call_id)
        events.append(NewEvent("tool_result", entry.result_json, call_id))
    return events, opened


def result_error(call_id: str, run_id: str, *, has_intent: bool) -> Exception:
    """Why a tool result cannot be logged: its intent was already answered, or
    (``has_intent`` false) there is no intent to answer."""
    if has_intent:
        return DuplicateToolCall(f"tool call {call_id!r} already has a result", run_id=run_id)
    return UnknownToolCall(
        f"no tool intent {call_id!r}; record_response must record it first", run_id=run_id
    )


def duplicate_intent(run_id: str) -> DuplicateToolCall:
    """The error of a response whose tool call id already has an intent in the run."""
    return DuplicateToolCall(
        "a tool call id in this response already has an intent in this run; nothing was stored",
        run_id=run_id,
    )


def proposed_checkpoint(
    checkpoint_id: int, round_no: int, lineage: int, candidate: Mapping[str, Any]
) -> tuple[CheckpointRecord, NewEvent]:
    """A stored candidate (proposed at ``lineage + 1``) and its ``checkpoint_proposed``."""
    event = encode_checked(
        {
            "checkpoint_id": checkpoint_id,
            "round": round_no,
            "lineage_seq": lineage,
            "candidate": candidate,
        }
    )
    record = CheckpointRecord(
        checkpoint_id, round_no, "proposed", candidate, None, lineage, lineage + 1, None, None
    )
    return record, NewEvent("checkpoint_proposed", event)


def checkpoint_decision(
    checkpoint: CheckpointRecord, accepted: bool, evidence: Any, run_id: str
) -> tuple[str, str, NewEvent]:
    """The verifier's decision on ``checkpoint``: its status, its evidence as JSON text and
    its ``checkpoint_accepted`` or ``checkpoint_rejected`` event."""
    status = "accepted" if accepted else "rejected"
    evidence_json = dumps(evidence, what="verifier evidence", run_id=run_id)
    event = encode_checked(
        {
            "checkpoint_id": checkpoint.id,
            "round": checkpoint.round,
            "lineage_seq": checkpoint.lineage_seq,
            "evidence": evidence,
        }
    )
    return status, evidence_json, NewEvent(f"checkpoint_{status}", event)


def already_decided(checkpoint: CheckpointRecord, run_id: str) -> CheckpointError:
    """The error of a second decision on one checkpoint (nothing is stored)."""
    return CheckpointError(
        f"checkpoint {checkpoint.id} already has a verifier decision", run_id=run_id
    )
