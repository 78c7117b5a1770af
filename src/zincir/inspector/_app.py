"""The inspector's Starlette app: runs and LangGraph threads, each a list and a page with
their JSON twins, read-only."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Collection, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._encryption import SEALED, Encryption
from .._errors import (
    DatabaseCorrupt,
    EncryptionKeyMissing,
    InvalidInput,
    NotAZincirDatabase,
    PayloadTampered,
    SchemaTooNew,
    StoreError,
    StoreUnavailable,
)
from .._validate import MAX_SEQUENCE
from ..store import RunRecord
from ..store._queue_reads import QueuePlace
from ..store._stall import stall_reason
from ..store.sqlite import EventRow, TimerRow, decode_json
from ..streams._sse import stream_endpoint
from ._conversation import MODEL_KINDS, conversation, failed_call_id
from ._db import (
    CHAT_EVENTS,
    EVENT_PAGE_SIZE,
    LIST_LIMIT,
    OPERATION_PAGE,
    ROW_LIMIT,
    Reader,
    View,
    open_read_only,
)
from ._live import ReadOnlyStreams
from ._security import SECURITY_HEADERS, SecurityMiddleware, UIAddress, parse_address
from ._threads import thread_detail, thread_url, with_anchors

__all__ = ["create_app"]

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
BADGES = frozenset({*STATUSES, "proposed", "accepted", "rejected"})
PREVIEW = 140
MAX_PRETTY = 100_000
LONG_TEXT = 600  # conversation texts longer than this (or of LONG_LINES lines) fold
LONG_LINES = 12
MAX_TEXT = 3_000  # a conversation text is cut here (its event loads whole on demand)
EVENT_TEXT = 2_000  # characters of an event's JSON in the log; opening it loads it whole
OUTCOME_TEXT = 300  # characters of an operation's outcome in its row; its record loads whole
PREVIEW_HEAD = 2_000  # characters shown of a LangGraph value that is not decoded whole
MAX_CURSOR_DIGITS = 18  # ?page= and ?after_seq= beyond this are refused (400), not parsed
MAX_OPERATION_TEXT = 1_000_000  # characters of an input or record on an operation's own page
MAX_STEP_ID = 1_024  # ?step_id= longer than this is refused (400)
PARTS = ("input", "record")
QUEUE_RUNS = 100  # runs listed per queue on the queues page (holding a slot, then waiting)
Row = Mapping[str, Any]
_SEALED: ContextVar[bool] = ContextVar("zincir_inspector_sealed", default=False)
"""Whether the snapshot a request reads is of an encrypted store without its keys."""


# -- formatting ---------------------------------------------------------------------------


def pretty(value: Any) -> str:
    """Indented JSON for a <pre> block (escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def pretty_capped(value: Any, limit: int = MAX_PRETTY) -> str:
    """Indented JSON cut at ``limit`` characters, so one huge event cannot swamp a page."""
    text = pretty(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… cut at {limit:,} of {len(text):,} characters (the API has it all)"


def head_text(value: Any, limit: int = PREVIEW_HEAD) -> str:
    """The head of a value too long (or not strict JSON) to decode, cut at ``limit``
    characters; the read-only view already cut it to its first bytes."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


def text_capped(value: Any, limit: int = MAX_TEXT) -> str:
    """Stored text as it is (other values as indented JSON), cut at ``limit`` characters."""
    if not isinstance(value, str):
        return pretty_capped(value, limit)
    if len(value) <= limit:
        return value
    return f"{value[:limit]}\n… cut at {limit:,} of {len(value):,} characters (the API has it all)"


def is_long(value: Any) -> bool:
    """Whether a text or value is long enough to fold behind a one-line preview."""
    text = value if isinstance(value, str) else pretty(value)
    return len(text) > LONG_TEXT or text.count("\n") >= LONG_LINES


def preview(value: Any, limit: int = PREVIEW) -> str:
    """A one-line excerpt of a value for summaries."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_time(text: Any) -> datetime | None:
    """A stored UTC timestamp as an aware datetime, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def age(text: Any, now: datetime) -> str:
    """How long ago (or how far ahead) a stored time is, e.g. ``5 min ago`` or ``in 2 h``."""
    moment = parse_time(text)
    if moment is None:
        return ""
    seconds = (now - moment).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            amount = int(seconds // size)
            return f"in {amount} {unit}" if future else f"{amount} {unit} ago"
    return ""


def utc_text(text: Any) -> str:
    """A stored time as ``YYYY-MM-DD HH:MM:SS UTC`` (converted to local time by local-time.js)."""
    moment = parse_time(text)
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_text(text: Any) -> str:
    """A stored time as ISO-8601 with milliseconds and ``Z`` (for ``<time datetime>``)."""
    moment = parse_time(text)
    if moment is None:
        return ""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


EVENT_CLASSES = {"llm_call": "etype-llm", "tool_call": "etype-tool", "tool_result": "etype-result"}


def event_class(kind: Any) -> str:
    """A CSS class for an event type (stored text never reaches the class attribute)."""
    if isinstance(kind, str) and kind.startswith("checkpoint_"):
        return "etype-checkpoint"
    return EVENT_CLASSES.get(kind, "etype-other") if isinstance(kind, str) else "etype-other"


def run_url(run_id: Any) -> str:
    """The run page path; the id is percent-encoded so it is only ever a path segment."""
    return "/runs/" + quote(str(run_id), safe="")


def conversation_url(run_id: Any, before: int) -> str:
    """The page of a run's conversation before event ``before`` (older turns)."""
    return f"/conversation/{quote(str(run_id), safe='')}?before={int(before)}"


def stream_url(run_id: Any) -> str:
    """The run's durable stream as Server-Sent Events (followed by the run page)."""
    return "/api/stream/" + quote(str(run_id), safe="")


def event_url(run_id: Any, seq: Any) -> str:
    """The JSON of one event of a run, whole."""
    return f"/api/event/{quote(str(run_id), safe='')}?seq={int(seq)}"


def operation_url(run_id: Any, step_id: Any, sequence: Any, part: str | None = None) -> str:
    """The page of one operation (its input and record whole), or with ``part`` the JSON of
    its input or record alone."""
    query = f"step_id={quote(str(step_id), safe='')}&sequence={int(sequence)}"
    if part is None:
        return f"/operation/{quote(str(run_id), safe='')}?{query}"
    return f"/api/operation/{quote(str(run_id), safe='')}?{query}&part={part}"


def status_class(status: Any) -> str:
    """A CSS class for a known status (unknown values never reach the class attribute)."""
    return f"status-{status}" if status in BADGES else "status-other"


def lease_of(run: Row, now: datetime) -> dict[str, Any]:
    """Lease state: ``held`` by an owner until a time, ``expired``, or ``none``."""
    owner, expires = run.get("lease_owner"), run.get("lease_expires_at")
    if owner is None or expires is None:
        return {"state": "none", "owner": None, "expires_at": None, "token": run.get("lease_token")}
    moment = parse_time(expires)
    live = moment is not None and moment > now
    return {
        "state": "held" if live else "expired",
        "owner": owner,
        "expires_at": expires,
        "token": run.get("lease_token"),
    }


def run_summary(
    run: RunRecord,
    now: datetime,
    arrived: Collection[str] = (),
    places: Mapping[str, QueuePlace] | None = None,
) -> dict[str, Any]:
    """The list/API view of an ``agent_runs`` row (stored config and result left out); the
    runs in ``arrived`` have the message they wait for; ``places``: the enqueued runs' queue
    places (``queue``: None for a run never enqueued)."""
    summary = {key: value for key, value in run.items() if key not in ("config", "result")}
    lease = lease_of(run, now)
    place = None if places is None else places.get(run["id"])
    held = None if place is None or not place.waiting else place.held_by
    reason = stall_reason(run, now, arrived=run["id"] in arrived, queued=held)
    summary.update(
        queue=None if place is None else dataclasses.asdict(place),
        event_count=int(run.get("last_seq") or 0),
        stall=None if reason is None else dataclasses.asdict(reason),
        budget=decode_json(run.get("budget")),
        lease=lease,
        lease_state=lease["state"],
        url=run_url(run.get("id")),
    )
    return summary


def thread_summary(thread: Row, now: datetime) -> dict[str, Any]:
    """The list/API view of a LangGraph thread: its row, lease state and page URL."""
    lease = lease_of(thread, now)
    return {
        **thread,
        "lease": lease,
        "lease_state": lease["state"],
        "url": thread_url(thread["thread_id"]),
    }


def _elapsed(run: RunRecord, now: datetime) -> float | None:
    """Seconds since the run was created (its budget's wall time counts from there)."""
    started = parse_time(run["created_at"])
    return None if started is None else max((now - started).total_seconds(), 0.0)


def event_view(event: EventRow, answered: set[str], failed: Collection[str] = ()) -> dict[str, Any]:
    """An event with a one-line summary and flags for highlighting (a call in ``failed``
    recorded a failure: it is failed, not in doubt)."""
    kind, payload = event.get("type"), event.get("payload")
    body = payload if isinstance(payload, dict) else {}
    flags: list[str] = []
    if kind == "llm_call":
        calls = body.get("tool_calls") or []
        summary = preview(body.get("content", ""), 100)
        if calls:
            names = ", ".join(str(c.get("name")) for c in calls if isinstance(c, dict))
            summary += f" → {len(calls)} tool call(s): {names}"
        if body.get("stop_reason"):
            summary = f"[{body['stop_reason']}] {summary}"
    elif kind == "tool_call":
        call_id = event.get("tool_call_id") or body.get("id")
        summary = f"{body.get('name')}({preview(body.get('arguments', {}), 90)}) id={call_id}"
        if call_id is not None and str(call_id) in failed:
            flags.append("failed")
        elif call_id is not None and str(call_id) not in answered:
            flags.append("pending")
    elif kind == "tool_result":
        summary = f"id={body.get('id')} {preview(body.get('result'), 100)}"
        if body.get("is_error"):
            flags.append("error")
    elif kind == "state_transition":
        summary = f"{body.get('from')} → {body.get('to')}"
        if body.get("reason"):
            summary += f" ({preview(body.get('reason'), 80)})"
        if body.get("to") == "cancelled":
            flags.append("error")
    elif kind == "budget_exceeded":
        spent = ", ".join(map(str, body.get("exceeded") or []))
        summary = f"{spent} spent · {preview(body.get('usage'), 80)}"
        flags.append("error")
    elif kind == "spin_detected":
        summary = f"{body.get('rule')} ({body.get('action')}) · {preview(body.get('evidence'), 80)}"
        flags.append("error")
    elif isinstance(kind, str) and kind.startswith("checkpoint_"):
        summary = f"round {body.get('round')} · checkpoint {body.get('checkpoint_id')}"
        if kind == "checkpoint_rejected":
            flags.append("error")
    else:
        summary = preview(payload)
    if payload == SEALED:  # an encrypted store read without keys
        summary = SEALED
    return {**event, "summary": summary, "flags": flags}


def outcome_detail(record: Any) -> Any:
    """The decoded detail of a record's outcome (output, error or wait reason), or None."""
    outcome = record.get("outcome") if isinstance(record, dict) else None
    detail: Any = None
    if isinstance(outcome, dict) and len(outcome) == 1:
        ((_, detail),) = outcome.items()
        if isinstance(detail, dict):
            detail = {
                key: (decode_json(value) if key.endswith("_json") else value)
                for key, value in detail.items()
            }
    return detail


def operation_summary(
    run_id: str, op: Mapping[str, Any], outcome: Mapping[str, Any] | None
) -> dict[str, Any]:
    """An operation of a page (no input or record: links load them), with the outcome
    detail of its record where that record was read (``outcome``)."""
    step, sequence = op["step_id"], op["sequence"]
    return {
        **op,
        "outcome_detail": None if outcome is None else outcome_detail(outcome.get("record")),
        "url": operation_url(run_id, step, sequence),
        "input_url": operation_url(run_id, step, sequence, "input"),
        "record_url": operation_url(run_id, step, sequence, "record"),
    }


def timer_view(timer: TimerRow, now: datetime) -> dict[str, Any]:
    """A timer with its state: completed, due (wake time passed) or waiting."""
    if timer.get("completed_at"):
        state = "completed"
    else:
        wake = parse_time(timer.get("wake_at"))
        state = "due" if wake is not None and wake <= now else "waiting"
    return {**timer, "state": state}


# -- pages ----------------------------------------------------------------------------------


class Pages:
    """Request handlers bound to one database and template environment."""

    def __init__(self, database: View, env: Environment) -> None:
        self.db = database
        self.env = env

    def html(self, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("sealed", _SEALED.get())
        text = self.env.get_template(name).render(db_path=self.db.path, **context)
        return HTMLResponse(text, status_code=code, headers={"cache-control": "no-store"})

    def error(self, request: Request, status: int, title: str, message: str) -> Response:
        """An error as JSON under /api/, else as a page; never a stack trace."""
        if request.url.path.startswith("/api/"):
            return json_response({"error": title, "message": message, "status": status}, status)
        return self.html("error.html", status, title=title, message=message, status=status)

    def guarded(self, request: Request, build: Callable[[Reader, datetime], Response]) -> Response:
        """Run ``build`` in a read snapshot; turn database problems into readable pages."""
        try:
            with self.db.snapshot() as reader:
                _SEALED.set(reader.sealed)
                return build(reader, datetime.now(UTC))
        except EncryptionKeyMissing as error:
            return self.error(request, 403, "A key of this database was not given", error.detail)
        except PayloadTampered as error:
            return self.error(
                request, 500, "A sealed value failed its check (or the key is wrong)", error.detail
            )
        except SchemaTooNew as error:
            return self.error(
                request, 409, "Database schema is newer than this zincir", error.detail
            )
        except NotAZincirDatabase as error:
            return self.error(request, 500, "Not a zincir database", error.detail)
        except DatabaseCorrupt as error:
            return self.error(
                request, 500, "The database is damaged and cannot be read", error.detail
            )
        except StoreUnavailable as error:
            return self.error(request, 503, "The database is busy or unavailable", error.detail)
        except StoreError as error:
            return self.error(request, 500, "The database could not be read", error.detail)
        except InvalidInput as error:
            return self.error(request, 400, "Bad request", error.detail)

    # -- run list -----------------------------------------------------------------------

    def _status_filter(self, request: Request) -> str | None:
        status = request.query_params.get("status", "").strip()
        return status[:64] or None

    def list_runs(self, request: Request) -> Response:
        status = self._status_filter(request)

        def build(reader: Reader, now: datetime) -> Response:
            found = reader.list_runs(status, LIST_LIMIT)
            arrived = reader.arrived(found)  # one query for the page
            places = reader.queue_places([run["id"] for run in found], now)
            runs = [run_summary(run, now, arrived, places) for run in found]
            return self.html(
                "runs.html", runs=runs, status=status, statuses=STATUSES, limit=LIST_LIMIT, now=now
            )

        return self.guarded(request, build)

    def api_runs(self, request: Request) -> Response:
        status = self._status_filter(request)

        def build(reader: Reader, now: datetime) -> Response:
            found = reader.list_runs(status, LIST_LIMIT)
            arrived = reader.arrived(found)  # one query for the page
            places = reader.queue_places([run["id"] for run in found], now)
            runs = [run_summary(run, now, arrived, places) for run in found]
            return json_response(
                {"runs": runs, "status": status, "limit": LIST_LIMIT, "sealed": reader.sealed}
            )

        return self.guarded(request, build)

    # -- one run ------------------------------------------------------------------------

    def _number(self, request: Request, name: str) -> int | None:
        """The ASCII-digit query parameter ``name`` (None when absent or empty), capped at
        MAX_SEQUENCE; 400 for anything else (``str.isdigit`` also accepts ``²``)."""
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return None
        if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_CURSOR_DIGITS:
            raise HTTPException(
                400,
                f"{name} must be a non-negative integer of at most {MAX_CURSOR_DIGITS} digits",
            )
        return min(int(raw), MAX_SEQUENCE)

    def _cursor(self, request: Request) -> int | None:
        """The ``after_seq`` of the requested event page (from ?after_seq= or ?page=), None
        when neither is given; a page past the end of the log is an empty page."""
        after = self._number(request, "after_seq")
        if after is not None:
            return after
        page = self._number(request, "page")
        if page is not None:
            return min(max(page - 1, 0) * EVENT_PAGE_SIZE, MAX_SEQUENCE)
        return None

    def _conversation_window(self, reader: Reader, run: RunRecord, before: int) -> dict[str, Any]:
        """The conversation of the CHAT_EVENTS events before ``before`` (one bounded read
        backwards), the seqs it spans, and the URL of the window before it (None at the
        log's start)."""
        run_id = str(run["id"])
        window = reader.events_before(run_id, before, CHAT_EVENTS)
        start = not window or int(window[0]["seq"]) <= 1 or len(window) < CHAT_EVENTS
        last_seq = int(run.get("last_seq") or 0)
        return {
            "conversation": conversation(
                reader, run, window, first_page=start, last_page=before > last_seq
            ),
            "first_seq": window[0]["seq"] if window else None,
            "last_seq": window[-1]["seq"] if window else None,
            "older_conversation": None
            if start
            else conversation_url(run_id, int(window[0]["seq"])),
        }

    def _operations(self, reader: Reader, run_id: str, offset: int) -> dict[str, Any]:
        """One page of the run's operations, the newest OPERATION_PAGE after ``offset`` in
        the order they ran; records are read only of operations other than successful
        model requests (whose records hold the whole conversation), inputs never."""
        found = reader.operation_page(run_id, offset, OPERATION_PAGE + 1)
        rows = found[:OPERATION_PAGE][::-1]
        keys = [
            (row["step_id"], row["sequence"])
            for row in rows
            if row["kind"] not in MODEL_KINDS or row["outcome"] not in (None, "success")
        ]
        outcomes = {
            (row["step_id"], row["sequence"]): row
            for row in (reader.operation_outcomes(run_id, keys) if keys else ())
        }
        return {
            "rows": [
                operation_summary(run_id, row, outcomes.get((row["step_id"], row["sequence"])))
                for row in rows
            ],
            "offset": offset,
            "older": offset + OPERATION_PAGE if len(found) > OPERATION_PAGE else None,
            "newer": max(offset - OPERATION_PAGE, 0) if offset > 0 else None,
            "page_size": OPERATION_PAGE,
        }

    def _run_detail(
        self, reader: Reader, run: RunRecord, cursor: int | None, ops: int, now: datetime
    ) -> dict[str, Any]:
        run_id = str(run["id"])
        after = cursor or 0
        events = reader.events(run_id, after, EVENT_PAGE_SIZE)
        intent_ids = [
            str(e["tool_call_id"])
            for e in events
            if e.get("type") == "tool_call" and e.get("tool_call_id") is not None
        ]
        answered = reader.answered(run_id, intent_ids)
        last_seq = int(run.get("last_seq") or 0)
        next_after = events[-1]["seq"] if events and events[-1]["seq"] < last_seq else None
        parent = reader.get_run(run["parent_id"]) if run["parent_id"] else None
        operations = self._operations(reader, run_id, ops)
        if cursor is None:  # the latest turns; older ones are loaded on demand
            latest = self._conversation_window(reader, run, MAX_SEQUENCE)
            chat = latest["conversation"]
        else:  # the turns among this page of the event log
            chat = conversation(
                reader, run, events, first_page=after == 0, last_page=next_after is None
            )
            latest = {"first_seq": None, "last_seq": None, "older_conversation": None}
        failed = {entry["call_id"] for entry in chat["entries"] if "call_id" in entry} | {
            call_id
            for op in reader.failed_operations(run_id, "tool_call", ROW_LIMIT)
            if (call_id := failed_call_id(op["kind"], op["outcome"], op["record"])) is not None
        }
        detail = {
            "run": {
                **run_summary(run, now, reader.arrived([run]), reader.queue_places([run_id], now)),
                "result": decode_json(run["result"]),
            },
            "config": decode_json(run["config"]),
            "parent": run_summary(parent, now) if parent else None,
            "children": [run_summary(child, now) for child in reader.children(run_id, ROW_LIMIT)],
            "origin": reader.run_origin(run_id),
            "forks": reader.forks_of(run_id, ROW_LIMIT),
            "usage": reader.usage(run),
            "elapsed_s": _elapsed(run, now),
            "pending_tools": [
                {
                    "seq": row["seq"],
                    "created_at": row["created_at"],
                    **(
                        row["payload"]
                        if isinstance(row["payload"], dict)
                        else {"id": row.get("tool_call_id"), "payload": row["payload"]}
                    ),
                }
                for row in reader.pending_tools(run_id, ROW_LIMIT)
                if str(row.get("tool_call_id")) not in failed  # failed, not in doubt
            ],
            "checkpoints": reader.checkpoints(run_id, ROW_LIMIT),
            "restart_checkpoints": reader.restart_checkpoints(run_id, ROW_LIMIT),
            "operations": operations["rows"],
            "operations_page": {key: value for key, value in operations.items() if key != "rows"},
            "steps": reader.steps(run_id, ROW_LIMIT),
            "timers": [timer_view(timer, now) for timer in reader.timers(run_id, ROW_LIMIT)],
            "messages": reader.messages(run_id, ROW_LIMIT),
            "conversation": chat,
            "conversation_latest": cursor is None,
            "conversation_first_seq": latest["first_seq"],
            "conversation_last_seq": latest["last_seq"],
            "older_conversation": latest["older_conversation"],
            "events": [event_view(event, answered, failed) for event in events],
            "after_seq": after,
            "next_after_seq": next_after,
            "page_size": EVENT_PAGE_SIZE,
            "row_limit": ROW_LIMIT,
            "live_stream": None,
            "sealed": reader.sealed,
        }
        if run["status"] in ("pending", "running") and not reader.sealed:  # followed live
            tail = reader.stream_tail(run_id)
            detail["live_stream"] = None if tail is None else tail.offset
        return detail

    def _missing_run(self, request: Request, run_id: str) -> Response:
        return self.error(
            request, 404, "Run not found", f"No run has the id {run_id!r} in this database."
        )

    def _with_run(
        self, request: Request, render: Callable[[dict[str, Any], int, datetime], Response]
    ) -> Response:
        """Look the run up (404 if absent), build its detail page of events, then ``render``."""
        run_id = str(request.path_params["run_id"])
        cursor = self._cursor(request)
        ops = self._number(request, "ops") or 0

        def build(reader: Reader, now: datetime) -> Response:
            run = reader.get_run(run_id)
            if run is None:
                return self._missing_run(request, run_id)
            return render(self._run_detail(reader, run, cursor, ops, now), cursor or 0, now)

        return self.guarded(request, build)

    def show_run(self, request: Request) -> Response:
        def render(detail: dict[str, Any], after: int, now: datetime) -> Response:
            last_seq = detail["run"]["event_count"]
            pages = max(1, math.ceil(last_seq / EVENT_PAGE_SIZE))
            nav = {
                "first": 0 if after > 0 else None,
                "prev": max(after - EVENT_PAGE_SIZE, 0) if after > 0 else None,
                "next": detail["next_after_seq"],
                "last": (pages - 1) * EVENT_PAGE_SIZE
                if detail["next_after_seq"] is not None
                else None,
                "page": after // EVENT_PAGE_SIZE + 1,
                "pages": pages,
                "aligned": after % EVENT_PAGE_SIZE == 0,
            }
            sections = {
                "pending tool intents": detail["pending_tools"],
                "checkpoints": detail["checkpoints"],
                "restart checkpoints": detail["restart_checkpoints"],
                "operations": detail["operations"],
                "steps": detail["steps"],
                "timers": detail["timers"],
                "messages": detail["messages"],
                "child runs": detail["children"],
            }
            empty = [name for name, rows in sections.items() if not rows]
            return self.html(
                "run.html",
                d=detail,
                nav=nav,
                now=now,
                empty=empty,
                config_text=pretty_capped(detail["config"]),
                result_text=pretty_capped(detail["run"]["result"]),
                page_of=lambda seq: (max(int(seq), 1) - 1) // EVENT_PAGE_SIZE * EVENT_PAGE_SIZE,
            )

        return self._with_run(request, render)

    def api_run(self, request: Request) -> Response:
        def render(detail: dict[str, Any], after: int, now: datetime) -> Response:
            for event in detail["events"]:
                del event["summary"], event["flags"]
            return json_response(detail)

        return self._with_run(request, render)

    # -- a long run's parts, on demand ----------------------------------------------------

    def _with_conversation(
        self, request: Request, render: Callable[[dict[str, Any], datetime], Response]
    ) -> Response:
        """The conversation window before ?before= (the latest when absent), then ``render``."""
        run_id = str(request.path_params["run_id"])
        before = self._number(request, "before")

        def build(reader: Reader, now: datetime) -> Response:
            run = reader.get_run(run_id)
            if run is None:
                return self._missing_run(request, run_id)
            start = MAX_SEQUENCE if before is None else before
            window = self._conversation_window(reader, run, start)
            detail = {"run": run_summary(run, now), "before": before, **window}
            return render({**detail, "sealed": reader.sealed}, now)

        return self.guarded(request, build)

    def show_conversation(self, request: Request) -> Response:
        def render(detail: dict[str, Any], now: datetime) -> Response:
            return self.html(
                "conversation.html",
                d=detail,
                now=now,
                page_of=lambda seq: (max(int(seq), 1) - 1) // EVENT_PAGE_SIZE * EVENT_PAGE_SIZE,
            )

        return self._with_conversation(request, render)

    def api_conversation(self, request: Request) -> Response:
        return self._with_conversation(request, lambda detail, now: json_response(detail))

    def _with_operation(
        self, request: Request, render: Callable[[dict[str, Any], datetime], Response]
    ) -> Response:
        """One operation by ?step_id= and ?sequence= (404 if absent), input and record whole."""
        run_id = str(request.path_params["run_id"])
        step_id = request.query_params.get("step_id", "")
        sequence = self._number(request, "sequence")
        if not step_id or len(step_id) > MAX_STEP_ID or sequence is None:
            raise HTTPException(
                400,
                f"an operation is named by ?step_id= (1 to {MAX_STEP_ID:,} characters) and "
                "?sequence= (a non-negative integer)",
            )

        def build(reader: Reader, now: datetime) -> Response:
            op = reader.operation(run_id, step_id, sequence)
            if op is None:
                return self.error(
                    request,
                    404,
                    "Operation not found",
                    f"Run {run_id!r} has no operation {step_id!r} #{sequence} in this database.",
                )
            detail = {
                **{key: value for key, value in op.items() if key not in ("input_json", "record")},
                "run_url": run_url(run_id),
                "input": op["input_json"],
                "record": op["record"],
                "outcome_detail": outcome_detail(op["record"]),
            }
            return render(detail, now)

        return self.guarded(request, build)

    def show_operation(self, request: Request) -> Response:
        def render(detail: dict[str, Any], now: datetime) -> Response:
            return self.html(
                "operation.html",
                op=detail,
                now=now,
                input_text=pretty_capped(detail["input"], MAX_OPERATION_TEXT),
                record_text=pretty_capped(detail["record"], MAX_OPERATION_TEXT),
            )

        return self._with_operation(request, render)

    def api_event(self, request: Request) -> Response:
        """One event of a run, whole, by ?seq= (one primary-key read)."""
        run_id = str(request.path_params["run_id"])
        seq = self._number(request, "seq")
        if seq is None or seq < 1:
            raise HTTPException(400, "seq must be a positive integer")

        def build(reader: Reader, now: datetime) -> Response:
            found = reader.events(run_id, seq - 1, 1)
            if not found or found[0]["seq"] != seq:
                return self.error(
                    request, 404, "Event not found", f"Run {run_id!r} has no event #{seq}."
                )
            event = found[0]
            return json_response(
                {
                    "run_id": event["run_id"],
                    "seq": event["seq"],
                    "type": event["type"],
                    "created_at": event["created_at"],
                    "tool_call_id": event["tool_call_id"],
                    "value": event["payload"],
                }
            )

        return self.guarded(request, build)

    def api_operation(self, request: Request) -> Response:
        part = request.query_params.get("part", "")
        if part and part not in PARTS:
            raise HTTPException(400, "part must be input or record (or absent for both)")

        def render(detail: dict[str, Any], now: datetime) -> Response:
            if not part:
                return json_response(detail)
            keys = ("run_id", "step_id", "sequence", "kind", "status", "outcome")
            return json_response(
                {**{key: detail[key] for key in keys}, "part": part, "value": detail[part]}
            )

        return self._with_operation(request, render)

    # -- queues and schedules -------------------------------------------------------------

    def _queues(self, reader: Reader) -> dict[str, Any]:
        """Each queue's limits, depth and runs (holding a slot, then waiting), and the
        schedules."""
        queues = [
            {
                "name": depth.settings.name,
                "concurrency": depth.settings.concurrency,
                "concurrency_per_key": depth.settings.concurrency_per_key,
                "rate_limit": depth.settings.rate_limit,
                "rate_period_s": None
                if depth.settings.rate_period is None
                else depth.settings.rate_period.total_seconds(),
                "waiting": depth.waiting,
                "live": depth.live,
                "runs": [
                    {**dataclasses.asdict(entry), "url": run_url(entry.run_id)}
                    for entry in reader.queue_entries(depth.settings.name, QUEUE_RUNS)
                ],
            }
            for depth in reader.queue_depths()
        ]
        schedules = [dataclasses.asdict(row) for row in reader.schedules(ROW_LIMIT)]
        return {"queues": queues, "schedules": schedules, "runs_per_queue": QUEUE_RUNS}

    def list_queues(self, request: Request) -> Response:
        def build(reader: Reader, now: datetime) -> Response:
            return self.html("queues.html", now=now, section="queues", **self._queues(reader))

        return self.guarded(request, build)

    def api_queues(self, request: Request) -> Response:
        return self.guarded(request, lambda reader, now: json_response(self._queues(reader)))

    # -- LangGraph threads --------------------------------------------------------------

    def list_threads(self, request: Request) -> Response:
        def build(reader: Reader, now: datetime) -> Response:
            threads = [thread_summary(row, now) for row in reader.threads(LIST_LIMIT)]
            return self.html(
                "threads.html", threads=threads, limit=LIST_LIMIT, now=now, section="threads"
            )

        return self.guarded(request, build)

    def api_threads(self, request: Request) -> Response:
        def build(reader: Reader, now: datetime) -> Response:
            threads = [thread_summary(row, now) for row in reader.threads(LIST_LIMIT)]
            return json_response({"threads": threads, "limit": LIST_LIMIT})

        return self.guarded(request, build)

    def _with_thread(
        self, request: Request, render: Callable[[dict[str, Any], datetime], Response]
    ) -> Response:
        """Look the thread up (404 if it has no checkpoint), build its detail, ``render``."""
        thread_id = str(request.path_params["thread_id"])

        def build(reader: Reader, now: datetime) -> Response:
            thread = reader.thread(thread_id)
            if thread is None:
                return self.error(
                    request,
                    404,
                    "Thread not found",
                    f"No LangGraph thread has the id {thread_id!r} in this database.",
                )
            return render(thread_detail(reader, thread_summary(thread, now)), now)

        return self.guarded(request, build)

    def show_thread(self, request: Request) -> Response:
        def render(detail: dict[str, Any], now: datetime) -> Response:
            return self.html("thread.html", d=with_anchors(detail), now=now, section="threads")

        return self._with_thread(request, render)

    def api_thread(self, request: Request) -> Response:
        return self._with_thread(request, lambda detail, now: json_response(detail))


def json_response(data: Any, status: int = 200) -> Response:
    """JSON that tolerates any stored value (``default=str``)."""
    body = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
    return Response(
        body,
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("zincir.inspector", "templates"),
        autoescape=True,  # every {{ value }} is HTML-escaped, in text and in attributes
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pretty=pretty,
        pretty_capped=pretty_capped,
        utc=utc_text,
        iso=iso_text,
        run_url=run_url,
        conversation_url=conversation_url,
        event_url=event_url,
        stream_url=stream_url,
        thread_url=thread_url,
        head_text=head_text,
        status_class=status_class,
        event_class=event_class,
        preview=preview,
        text_capped=text_capped,
        is_long=is_long,
    )
    env.globals.update(age=age, EVENT_TEXT=EVENT_TEXT, OUTCOME_TEXT=OUTCOME_TEXT)
    return env


def create_app(
    database: str | os.PathLike[str] | View,
    *,
    address: UIAddress | str | None = None,
    encryption: Encryption | None = None,
) -> Starlette:
    """The inspector for a zincir database (a SQLite path or ``sqlite:///PATH``, a
    ``postgresql://`` URL, or an opened read-only view), answering only requests addressed
    to ``address``. ``encryption`` opens an encrypted store's payloads when the database is
    given by its location (None: ``$ZINCIR_ENCRYPTION_KEYS``, if set); without keys they
    show as ``‹sealed›``, and no key ever reaches a page or a response.

    Raises NotAZincirDatabase when the file is missing, not SQLite or holds no zincir schema
    (DatabaseCorrupt when its schema cannot be read, StoreUnavailable when the server is
    down); a schema newer than this code is served as a readable 409 page instead, damaged
    pages met later as a readable 500 page.
    """
    if isinstance(database, str | os.PathLike):
        db = open_read_only(database, encryption=encryption)
    else:
        db = database
    try:
        db.check()
    except SchemaTooNew:
        pass
    bound = address if isinstance(address, UIAddress) else parse_address(address)
    pages = Pages(db, _environment())

    def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "unexpected error"
        title = {404: "Not found", 400: "Bad request"}.get(status, "Error")
        return pages.error(request, status, title, str(detail))

    def crashed(request: Request, exc: Exception) -> Response:
        response = pages.error(
            request,
            500,
            "Internal error",
            f"The inspector failed to render this page ({type(exc).__name__}).",
        )
        for name, value in SECURITY_HEADERS:  # this handler runs outside the middleware
            response.headers[name] = value
        return response

    app = Starlette(
        routes=[
            Route("/", pages.list_runs, methods=["GET"]),
            Route("/runs/{run_id:path}", pages.show_run, methods=["GET"]),
            Route("/api/runs", pages.api_runs, methods=["GET"]),
            Route("/api/runs/{run_id:path}", pages.api_run, methods=["GET"]),
            Route("/conversation/{run_id:path}", pages.show_conversation, methods=["GET"]),
            Route("/api/conversation/{run_id:path}", pages.api_conversation, methods=["GET"]),
            Route("/operation/{run_id:path}", pages.show_operation, methods=["GET"]),
            Route("/api/event/{run_id:path}", pages.api_event, methods=["GET"]),
            Route("/api/operation/{run_id:path}", pages.api_operation, methods=["GET"]),
            Route("/api/stream/{run_id:path}", stream_endpoint(ReadOnlyStreams(db))),
            Route("/queues", pages.list_queues, methods=["GET"]),
            Route("/api/queues", pages.api_queues, methods=["GET"]),
            Route("/threads", pages.list_threads, methods=["GET"]),
            Route("/threads/{thread_id:path}", pages.show_thread, methods=["GET"]),
            Route("/api/threads", pages.api_threads, methods=["GET"]),
            Route("/api/threads/{thread_id:path}", pages.api_thread, methods=["GET"]),
            Mount("/static", StaticFiles(packages=[("zincir.inspector", "static")]), name="static"),
        ],
        exception_handlers={HTTPException: http_error, Exception: crashed},
    )
    app.add_middleware(SecurityMiddleware, allowed_hosts=bound.allowed_hosts())
    app.state.database = db
    app.state.address = bound
    return app
