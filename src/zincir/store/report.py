"""Plain-text views of runs and their event logs (``zincir runs``, the demo's summary).

The formatters take typed records (:class:`RunRecord`, and events as ``(seq, type,
payload)``), so the same text comes from a live store or from the read-only view.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from .._encryption import SEALED
from .._errors import RunNotFound
from ._protocol import Store
from ._queues import QueueDepth, QueuedRun
from ._readonly_rows import decode_json
from ._records import RunRecord
from ._stall import stall_reason

__all__ = [
    "EventLine",
    "format_queues",
    "format_run",
    "format_run_log",
    "format_runs",
    "format_stuck_runs",
    "run_document",
    "run_output",
]

EventLine = tuple[int, str, Any]
"""One event as the report shows it: its seq, its type and its decoded payload."""


def _short(value: Any, width: int = 90) -> str:
    if value == SEALED:  # an encrypted store read without its keys
        return SEALED
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _terminal(text: str) -> str:
    """Text for a terminal, line by line: control characters escaped, never sent raw."""
    return "\n".join(
        line if line.isprintable() else json.dumps(line, ensure_ascii=False)[1:-1]
        for line in text.split("\n")
    )


def run_output(run: RunRecord) -> str | None:
    """What a finished run returned, for a person: an agent's output text, else its result
    as JSON; None while it has none."""
    result = decode_json(run["result"])
    if result is None:
        return None
    if result == SEALED:
        return SEALED
    if isinstance(result, dict) and isinstance(result.get("output"), str):
        return str(result["output"])
    return json.dumps(result, ensure_ascii=False)


def run_document(
    run: RunRecord,
    events: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    arrived: bool = False,
    sealed: bool = False,
) -> dict[str, Any]:
    """A run as one JSON document with whole payloads: its row (config, result and budget
    decoded), its output, why it is not moving and every event (``sealed``: read without
    the keys of an encrypted store, the payloads are ``‹sealed›``, and ``sealed`` says so)."""
    reason = stall_reason(run, now, arrived=arrived)
    decoded = {name: decode_json(run[name]) for name in ("config", "result", "budget")}
    return {
        **({"sealed": True} if sealed else {}),
        "run": {**run, **decoded},
        "output": run_output(run),
        "waiting": None if reason is None else asdict(reason),
        "events": [
            {name: event[name] for name in ("seq", "type", "created_at", "tool_call_id", "payload")}
            for event in events
        ],
    }


def _version(run: RunRecord) -> str:
    """A run's application version, ``-`` when it is unversioned."""
    return run.get("app_version") or "-"


def _place(place: QueuedRun | None) -> str:
    """A run's queue, key and priority (``queue[key] p=N``), ``-`` for a run not enqueued."""
    if place is None:
        return "-"
    key = "" if place.key is None else f"[{place.key}]"
    return f"{place.queue}{key} p={place.priority}"


def format_runs(runs: Iterable[RunRecord], places: Mapping[str, QueuedRun] | None = None) -> str:
    """One line per run: id, status, events, updated, app version, name; with ``places``
    (some run enqueued), its queue, key and priority after the name."""
    found = list(runs)
    if not found:
        return "no runs"
    width = max(len("version"), *(len(_version(run)) for run in found))
    named = max(len("name"), *(len(run["name"]) for run in found)) if places else 0
    queue = f"  {'name':<{named}}  queue" if places else "  name"
    lines = [
        f"{'run id':<36}  {'status':<9}  {'events':>6}  {'updated':<27}  {'version':<{width}}"
        + queue
    ]
    for run in found:
        tail = (
            f"  {run['name']:<{named}}  {_place(places.get(run['id']))}"
            if places
            else f"  {run['name']}"
        )
        lines.append(
            f"{run['id']:<36}  {run['status']:<9}  {run['last_seq']:>6}  "
            f"{run['updated_at']:<27}  {_version(run):<{width}}" + tail
        )
    return "\n".join(lines)


def format_queues(depths: Iterable[QueueDepth]) -> str:
    """One line per queue: name, its limits (``-``: none), runs waiting, runs holding a slot."""
    found = list(depths)
    if not found:
        return "no queues"
    width = max(len("queue"), *(len(depth.settings.name) for depth in found))
    lines = [
        f"{'queue':<{width}}  {'concurrency':>11}  {'per key':>7}  {'rate':<16}  waiting  live"
    ]
    for depth in found:
        s = depth.settings
        rate = "-" if s.rate_limit is None else f"{s.rate_limit}/{s.rate_period}"
        lines.append(
            f"{s.name:<{width}}  {_limit(s.concurrency):>11}  {_limit(s.concurrency_per_key):>7}  "
            f"{rate:<16}  {depth.waiting:>7}  {depth.live:>4}"
        )
    return "\n".join(lines)


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_stuck_runs(
    runs: Iterable[RunRecord],
    now: datetime | None = None,
    *,
    arrived: Collection[str] = (),
    places: Mapping[str, QueuedRun] | None = None,
) -> str:
    """One line per live run without progress: id, status, last progress, and why (the
    runs in ``arrived`` have their awaited message; ``places``: the enqueued runs' queue
    places, naming the limit that holds a waiting one)."""
    moment = now or datetime.now(UTC)
    found = list(runs)
    if not found:
        return "no stuck runs"
    lines = [f"{'run id':<36}  {'status':<9}  {'no progress since':<27}  why"]
    for run in found:
        place = None if places is None else places.get(run["id"])
        held = None if place is None else place.held_by
        reason = stall_reason(run, moment, arrived=run["id"] in arrived, queued=held)
        lines.append(
            f"{run['id']:<36}  {run['status']:<9}  {run['updated_at']:<27}  "
            f"{reason.text if reason else '-'}"
        )
    return "\n".join(lines)


def format_run_log(
    run: RunRecord,
    events: Iterable[EventLine],
    now: datetime | None = None,
    *,
    arrived: bool = False,
    sealed: bool = False,
) -> str:
    """A run's summary (with why a live run is not moving; ``arrived``: the message it
    waits for is there) and its event log; ``sealed``: an encrypted store read without its
    keys, whose payloads show as ``‹sealed›``."""
    lease = (
        f"held by {run['lease_owner']} until {run['lease_expires_at']}"
        if run["lease_owner"]
        else "none"
    )
    lines = [
        f"run       {run['id']}",
        f"name      {run['name']}",
        f"status    {run['status']}",
        f"provider  {run['provider'] or '-'}",
        f"version   {_version(run)}",
        f"lease     {lease} (token {run['lease_token']})",
        f"config    {run['config']}",
        f"created   {run['created_at']}",
        f"updated   {run['updated_at']}",
        f"events    {run['last_seq']}",
    ]
    if sealed:
        lines.append(
            f"payload   {SEALED} (the database is encrypted: give --key-file or "
            "$ZINCIR_ENCRYPTION_KEYS to read payloads)"
        )
    if run["status"] == "failed" and run["last_error"]:
        lines.append(f"error     {_terminal(run['last_error'])}")
    output = run_output(run)
    if output is not None:
        lines.append("output    " + _terminal(output).replace("\n", "\n" + " " * 10))
    reason = stall_reason(run, now or datetime.now(UTC), arrived=arrived)
    if reason is not None:
        lines.append(f"waiting   {reason.text}")
    lines += [
        "",
        f"{'seq':>5}  {'type':<20}  payload",
    ]
    for seq, kind, payload in events:
        lines.append(f"{seq:>5}  {kind:<20}  {_short(payload)}")
    return "\n".join(lines)


async def format_run(store: Store, run_id: str, *, limit: int | None = None) -> str:
    """A run of ``store`` with its event log (RunNotFound if there is none)."""
    run = await store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r} in {store.path}", run_id=run_id)
    events = await store.list_events(run_id, limit=limit)
    return format_run_log(run, ((e.seq, e.type, e.payload) for e in events))
