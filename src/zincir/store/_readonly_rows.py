"""The rows the read-only view returns on every backend (the inspector, ``zincir runs``),
and what each backend's snapshot does to them alike: JSON columns decoded, row limits
bounded, usage totals cached per run.

Timestamps in these rows are the fixed-width UTC text the store writes (SQLite stores it;
the PostgreSQL view renders its timestamptz values so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, TypedDict, cast

from .._json import StrictJsonError, loads_strict
from .._validate import MAX_SEQUENCE
from ._records import RunRecord

__all__ = [
    "JSON_COLUMNS",
    "REQUIRED_TABLES",
    "CheckpointRow",
    "EventRow",
    "MessageRow",
    "OperationOutcomeRow",
    "OperationRow",
    "OperationSummaryRow",
    "PendingToolRow",
    "RestartCheckpointRow",
    "Row",
    "StepRow",
    "TimerRow",
    "Usage",
    "UsageCache",
    "decode_columns",
    "decode_json",
    "event_pages",
    "outcome_keys",
    "outcomes_in_order",
    "row_limit",
    "row_seq",
    "select_list",
    "sum_usage",
    "tail_by_seq",
]

Row = dict[str, Any]
Usage = dict[str, int | float]

REQUIRED_TABLES: Final = frozenset({"schema_migrations", "agent_runs", "events"})
"""The tables without which a database is not a zincir one."""
JSON_COLUMNS: Final = frozenset({"payload", "state", "evidence", "record", "input_json", "result"})
"""The columns :func:`decode_columns` decodes."""
_USAGE_CACHE_SIZE: Final = 1000


class EventRow(TypedDict):
    """One event of a run's log, its payload decoded."""

    run_id: str
    seq: int
    type: str
    payload: Any
    created_at: str
    tool_call_id: str | None


class PendingToolRow(TypedDict):
    """A tool intent with no result yet (in doubt after a crash)."""

    seq: int
    payload: Any
    created_at: str
    tool_call_id: str | None


class CheckpointRow(TypedDict):
    """A semantic checkpoint: its candidate state, decision, evidence and lineage."""

    id: int
    run_id: str
    round: int
    status: str
    state: Any
    evidence: Any
    lineage_seq: int
    proposed_seq: int
    decided_seq: int | None
    created_at: str
    decided_at: str | None


class OperationRow(TypedDict):
    """A durable operation of a run, its input and record decoded."""

    run_id: str
    step_id: str
    sequence: int
    kind: str
    handler_id: str
    input_digest: str
    input_json: Any
    status: str
    outcome: str | None
    record: Any
    claim_owner: str | None
    claim_expires_at: str | None
    attempts: int
    created_at: str
    updated_at: str
    completed_at: str | None


class OperationOutcomeRow(TypedDict):
    """A durable operation's state and record, without its (possibly large) input."""

    step_id: str
    sequence: int
    kind: str
    handler_id: str
    status: str
    outcome: str | None
    record: Any
    claim_owner: str | None
    claim_expires_at: str | None
    attempts: int
    updated_at: str
    completed_at: str | None


class OperationSummaryRow(TypedDict):
    """A durable operation's identity and state, without its input or record: what a page
    of a long run's operations lists (the input and record are read one at a time)."""

    step_id: str
    sequence: int
    kind: str
    handler_id: str
    input_digest: str
    status: str
    outcome: str | None
    claim_owner: str | None
    claim_expires_at: str | None
    attempts: int
    created_at: str
    updated_at: str
    completed_at: str | None


class RestartCheckpointRow(TypedDict):
    """A restart checkpoint of a run: its id, revision and size, and the head of its payload
    as text (never decoded: the inspector shows it escaped and truncated)."""

    checkpoint_id: str
    revision: int
    size: int
    preview: str
    updated_at: str


class StepRow(TypedDict):
    """A workflow step: its claim and its decoded result."""

    run_id: str
    name: str
    status: str
    claim_owner: str | None
    claim_token: int | None
    result: Any
    started_at: str
    completed_at: str | None


class TimerRow(TypedDict):
    """A workflow timer."""

    run_id: str
    name: str
    wake_at: str
    completed_at: str | None
    created_at: str


class MessageRow(TypedDict):
    """A message sent to or from a run, its payload decoded."""

    id: int
    to_run_id: str
    topic: str
    payload: Any
    from_run_id: str | None
    send_key: str | None
    created_at: str
    received_by: str | None
    received_at: str | None


def select_list(row_type: type[Any]) -> str:
    """The columns of a row type, in order, as a select list."""
    return ", ".join(row_type.__annotations__)


def decode_json(text: Any) -> Any:
    """Stored JSON text as a value; text that is not one strict JSON document stays text."""
    if not isinstance(text, str):
        return text
    try:
        return loads_strict(text)
    except StrictJsonError:
        return text


def decode_columns(rows: list[Row]) -> list[Row]:
    """``rows`` with their :data:`JSON_COLUMNS` decoded (in place)."""
    for row in rows:
        for column in JSON_COLUMNS & row.keys():
            row[column] = decode_json(row[column])
    return rows


def row_limit(limit: int) -> int:
    """A row limit the driver can bind (at least 0, at most 2**63-1)."""
    return min(max(int(limit), 0), MAX_SEQUENCE)


def event_pages(
    events: Callable[[str, int, int], list[EventRow]], run_id: str, after_seq: int, page_size: int
) -> Iterator[EventRow]:
    """Every event after ``after_seq``, read page by page with ``events`` (a snapshot's)."""
    while True:
        page = events(run_id, after_seq, page_size)
        yield from page
        if len(page) < page_size:
            return
        after_seq = page[-1]["seq"]


def outcome_keys(keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The operation keys (step id, sequence) to read, each once, in the order asked."""
    return list(dict.fromkeys((str(step), row_limit(seq)) for step, seq in keys))


def outcomes_in_order(
    wanted: Sequence[tuple[str, int]], rows: Iterable[Row]
) -> list[OperationOutcomeRow]:
    """The rows read for ``wanted`` keys, in their order; keys with no row left out."""
    found = {(str(row["step_id"]), int(row["sequence"])): row for row in rows}
    return [cast(OperationOutcomeRow, found[key]) for key in wanted if key in found]


def sum_usage(payloads: Iterable[Any]) -> list[tuple[str, int | float]]:
    """(field, total) over the numeric ``usage`` fields of ``llm_call`` payloads (JSON text),
    summed as SQLite sums (an int for integers only); a payload that is not JSON is skipped."""
    sums: dict[str, tuple[Decimal, bool]] = {}
    for payload in payloads:
        document = decode_json(payload)
        usage = document.get("usage") if isinstance(document, Mapping) else None
        if not isinstance(usage, Mapping):
            continue
        for name, value in usage.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total, whole = sums.get(str(name), (Decimal(0), True))
                sums[str(name)] = (total + Decimal(value), whole and isinstance(value, int))
    return [(name, int(total) if whole else float(total)) for name, (total, whole) in sums.items()]


UsageSums = Callable[[str, int, int], Iterable[Sequence[Any]] | None]
"""A snapshot's sums of the numeric ``usage`` fields of a run's ``llm_call`` events in
(after, upto]: (field, total) pairs, or None when this database cannot sum them."""


class UsageCache:
    """Usage totals per run (by id and creation time) and the seq they were summed to: the
    log is append-only, so only newer events are summed again. Shared by a view's
    snapshots, from any thread."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, str], tuple[int, Usage]] = {}
        self._lock = threading.Lock()

    def usage(self, run: RunRecord, sums: UsageSums) -> Usage:
        """The run's usage totals, the cached ones extended by ``sums`` of newer events."""
        run_id = str(run["id"])
        key = (run_id, str(run["created_at"]))
        with self._lock:
            upto, cached = self._totals.get(key, (0, {}))
        last_seq = int(run["last_seq"] or 0)
        if upto >= last_seq and upto:
            return dict(cached)
        totals = dict(cached)
        found = sums(run_id, upto, last_seq)
        if found is None:
            return totals
        for name, total in found:
            if isinstance(total, int | float):
                totals[str(name)] = totals.get(str(name), 0) + total
        with self._lock:
            if len(self._totals) > _USAGE_CACHE_SIZE:
                self._totals.clear()
            self._totals[key] = (last_seq, dict(totals))
        return dict(totals)


def tail_by_seq(archived: list[EventRow], live: list[EventRow], limit: int) -> list[EventRow]:
    """The last ``limit`` events, in seq order, of a log's archived and live parts (each
    read newest first and at most ``limit`` long, then reversed here)."""
    merged = sorted([*archived, *live], key=row_seq)
    return merged[max(len(merged) - limit, 0) :]


def row_seq(row: EventRow) -> int:
    """An event row's seq (the order :func:`merge_by_seq` merges in)."""
    return int(row["seq"])
