"""An agent run's conversation, read from one page of its event log (no SQL here).

Each ``llm_call`` event is a model turn (its text, tool calls, stop reason, model and usage),
each ``tool_result`` the answer to one call (matched by call id), in log order. A durable
agent run adds what its operations know: which ``model.request`` produced a turn, the
instructions and prompt its first request carried, operations that failed or wait, and the
request still in flight. A call whose tool operation recorded a failure is failed, not in
doubt: the failure is shown on the call, its message only when the run's error does not
already say it. Only the events of the page being shown are read, plus indexed look-ups for
the calls and results that sit on other pages, so a long run stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._encryption import SEALED
from .._json import StrictJsonError, loads_strict
from ..store import RunRecord
from ..store.sqlite import EventRow
from ._db import Reader

__all__ = ["MAX_LOOKUPS", "MODEL_KINDS", "conversation", "failed_call_id"]

MODEL_KINDS = frozenset({"model_request", "model_stream"})
NOTED_KINDS = MODEL_KINDS | {"tool_call", "mcp_request", "approval_resume"}
MAX_LOOKUPS = 20  # operations looked up per page for a failure's detail
LIVE = frozenset({"pending", "running"})


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text_of(parts: Any) -> str:
    """The text parts of a payloads ``Message``, joined."""
    if not isinstance(parts, list):
        return ""
    return "".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, Mapping) and part.get("type") == "text"
    )


def prompt_of(request: Any) -> dict[str, Any] | None:
    """The instructions and prompt of a ``ModelRequest`` document: its messages before the
    first ``assistant`` one, and the names of the tools on offer (an encrypted store read
    without keys: its prompt, ``‹sealed›``)."""
    if request == SEALED:
        return {"messages": [{"role": "user", "text": SEALED}], "tools": [], "model": None}
    body = _mapping(request)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    opening: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") == "assistant":
            break
        opening.append({"role": str(message.get("role")), "text": _text_of(message.get("parts"))})
    tools = body.get("tools")
    names = (
        [str(tool.get("name")) for tool in tools or () if isinstance(tool, Mapping)]
        if isinstance(tools, list)
        else []
    )
    return {"messages": opening, "tools": names, "model": body.get("model") or None}


def _usage(value: Any) -> dict[str, int | float]:
    """The numeric, non-zero counters of a usage mapping (``details`` left to the API)."""
    return {
        str(key): number
        for key, number in _mapping(value).items()
        if isinstance(number, int | float) and not isinstance(number, bool) and number
    }


def _failure(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The error or wait reason in an operation record's outcome."""
    outcome = _mapping(_mapping(row).get("record")).get("outcome")
    if not isinstance(outcome, Mapping) or len(outcome) != 1:
        return {}
    ((_, detail),) = outcome.items()
    detail = _mapping(detail)
    return {
        key: detail[key] for key in ("error", "message", "retryable", "reason") if key in detail
    }


def failed_call_id(kind: Any, outcome: Any, record: Any) -> str | None:
    """The tool call id of a ``tool_call`` operation whose record is a failure, read from
    the invocation the record carries; None for any other operation."""
    if kind != "tool_call" or outcome != "failure":
        return None
    text = _mapping(_mapping(record).get("invocation")).get("input_json")
    try:
        body = loads_strict(text) if isinstance(text, str) else text
    except StrictJsonError:
        return None
    call_id = _mapping(_mapping(body).get("call")).get("tool_call_id")
    return None if call_id is None else str(call_id)


def _conversational(entry: Mapping[str, Any]) -> bool:
    """A model turn, a tool result or a model operation (a workflow's failed tool operation
    alone does not make a conversation)."""
    return entry["kind"] != "operation" or entry.get("operation_kind") in MODEL_KINDS


def conversation(
    reader: Reader,
    run: RunRecord,
    events: Sequence[EventRow],
    *,
    first_page: bool,
    last_page: bool,
) -> dict[str, Any]:
    """The conversation held by ``events`` (one page of the run's log), as plain data."""
    run_id = str(run["id"])
    entries: list[dict[str, Any]] = []
    intents: dict[str, dict[str, Any]] = {}  # call id -> its call, as listed in its turn
    results: dict[str, dict[str, Any]] = {}  # call id -> its result entry on this page
    lookups: list[tuple[str, int]] = []
    model_step: tuple[str, int] | None = None  # the last model operation seen
    first_step: str | None = None
    waiting_op: dict[str, Any] | None = None  # a model operation not yet followed by its turn

    for event in events:
        kind, seq = event.get("type"), event["seq"]
        sealed = event.get("payload") == SEALED  # an encrypted store read without keys
        body = _mapping(event.get("payload"))
        if kind == "operation_completed" and body.get("kind") in NOTED_KINDS:
            op: dict[str, Any] = {
                "step_id": str(body.get("step_id")),
                "sequence": body.get("sequence"),
                "kind": str(body.get("kind")),
                "outcome": body.get("outcome"),
                "attempts": body.get("attempts"),
                "handler_id": body.get("handler_id"),
            }
            if op["kind"] in MODEL_KINDS and isinstance(op["sequence"], int):
                model_step = (op["step_id"], op["sequence"])
                if op["sequence"] == 0 and first_step is None:
                    first_step = op["step_id"]
            if op["outcome"] == "success":
                waiting_op = op if op["kind"] in MODEL_KINDS else waiting_op
                continue
            noted: dict[str, Any] = {
                **op,
                "kind": "operation",
                "operation_kind": op["kind"],
                "seq": seq,
                "created_at": event.get("created_at"),
            }
            if isinstance(op["sequence"], int) and len(lookups) < MAX_LOOKUPS:
                lookups.append((op["step_id"], op["sequence"]))
            entries.append(noted)
        elif kind == "llm_call":
            calls = []
            for call in body.get("tool_calls") or ():
                call = _mapping(call)
                view: dict[str, Any] = {
                    "id": None if call.get("id") is None else str(call.get("id")),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                    "turn_seq": seq,
                }
                calls.append(view)
                if view["id"] is not None:
                    intents.setdefault(view["id"], view)
            entries.append(
                {
                    "kind": "response",
                    "seq": seq,
                    "created_at": event.get("created_at"),
                    "content": SEALED if sealed else body.get("content"),
                    "tool_calls": calls,
                    "stop_reason": body.get("stop_reason"),
                    "model": body.get("model"),
                    "usage": body.get("usage"),
                    "usage_counts": _usage(body.get("usage")),
                    "operation": waiting_op,
                }
            )
            waiting_op = None
        elif kind == "tool_call":
            call_id = event.get("tool_call_id") or body.get("id")
            if call_id is not None and str(call_id) in intents:
                intents[str(call_id)]["intent_seq"] = seq
        elif kind == "tool_result":
            call_id = event.get("tool_call_id") or body.get("id")
            entry: dict[str, Any] = {
                "kind": "tool_result",
                "seq": seq,
                "created_at": event.get("created_at"),
                "id": None if call_id is None else str(call_id),
                "name": None,
                "result": SEALED if sealed else body.get("result"),
                "is_error": bool(body.get("is_error")),
                "call_seq": None,
                "call_on_page": False,
            }
            entries.append(entry)
            if entry["id"] is not None:
                results.setdefault(entry["id"], entry)

    # results whose call was asked for on an earlier page: name it from its intent (indexed)
    earlier = [call_id for call_id in results if call_id not in intents]
    for row in reader.tool_intents(run_id, earlier) if earlier else ():
        body = _mapping(row.get("payload"))
        answer = results.get(str(row.get("tool_call_id")))
        if answer is not None:
            answer["name"] = body.get("name")
            answer["call_seq"] = row["seq"]
            answer["call_on_page"] = False
    for call_id, answer in results.items():
        call = intents.get(call_id)
        if call is not None:
            answer["name"] = call["name"]
            answer["call_seq"] = call["turn_seq"]
            answer["call_on_page"] = True

    details = {
        (row["step_id"], row["sequence"]): row
        for row in (reader.operation_outcomes(run_id, lookups) if lookups else ())
    }
    failed: dict[str, dict[str, Any]] = {}  # call id -> its tool operation's failure entry
    error = str(run.get("last_error") or "")
    for entry in entries:
        if entry["kind"] == "operation":
            outcome = details.get((entry["step_id"], entry["sequence"]))
            entry.update(_failure(outcome))
            message = entry.get("message")
            entry["in_run_error"] = bool(message and str(message) in error)
            call_id = failed_call_id(
                entry["operation_kind"], entry["outcome"], _mapping(outcome).get("record")
            )
            if call_id is not None:
                entry["call_id"] = call_id
                entry["on_call"] = call_id in intents  # shown on its call, not again
                failed[call_id] = entry

    # each call's state: answered here or on a later page, failed, or without a result
    unanswered = [call_id for call_id in intents if call_id not in results]
    later = reader.result_seqs(run_id, unanswered) if unanswered else {}
    for call_id, call in intents.items():
        if call_id in results:
            call["state"], call["result_seq"] = "answered", results[call_id]["seq"]
        elif call_id in later:
            call["state"], call["result_seq"] = "answered_later", later[call_id]
        elif call_id in failed:
            call["state"], call["result_seq"] = "failed", None
            call["failure"] = failed[call_id]
        else:
            call["state"], call["result_seq"] = "pending", None

    prompt = None
    first = reader.first_model_request(run_id, first_step) if first_page else None
    if first is not None:
        prompt = prompt_of(first.get("input_json"))
        if prompt is not None:
            prompt.update(step_id=first["step_id"], sequence=first["sequence"])

    in_flight = None
    if last_page and run.get("status") in LIVE:
        if model_step is not None:
            candidate: tuple[str, int] | None = (model_step[0], model_step[1] + 1)
        elif first is not None:
            candidate = (first["step_id"], first["sequence"])
        else:
            candidate = None
        rows = reader.operation_outcomes(run_id, [candidate]) if candidate else []
        if rows and rows[0]["outcome"] is None:
            flight: Mapping[str, Any] = rows[0]
            in_flight = {
                key: flight[key]
                for key in (
                    "step_id",
                    "sequence",
                    "kind",
                    "handler_id",
                    "attempts",
                    "claim_owner",
                    "claim_expires_at",
                    "updated_at",
                )
            }

    turns = sum(1 for entry in entries if entry["kind"] == "response")
    return {
        "present": bool(prompt or in_flight or any(map(_conversational, entries))),
        "turns": turns,
        "prompt": prompt,
        "entries": entries,
        "in_flight": in_flight,
    }
