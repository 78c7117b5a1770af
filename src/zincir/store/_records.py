"""The typed records the store exchanges with every layer: no driver rows leave ``store/``.

Timestamps inside :class:`RunRecord` are the stored fixed-width UTC text
(``2030-01-01T00:00:00.000000Z``), which sorts like the instants it names; the other
records carry aware datetimes and decoded JSON values.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal, NamedTuple, TypedDict, TypeVar, cast

from .._json import loads_strict
from .._time import to_db
from ._owner import new_owner_id

S = TypeVar("S")

__all__ = [
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_SEALED",
    "LIVE_STATUSES",
    "RUN_COLUMNS",
    "RUN_SEALED",
    "TERMINAL_STATUSES",
    "CheckpointRecord",
    "Event",
    "Lease",
    "LogEntry",
    "NewEvent",
    "ResponseEntry",
    "RunRecord",
    "RunState",
    "RunStatus",
    "TimeDecoder",
    "ToolResultEntry",
    "checkpoint_record",
    "driver_time",
    "event_record",
    "event_seq",
    "merge_by_seq",
    "new_owner_id",
    "optional_time",
]

RunStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
LIVE_STATUSES: Final = frozenset({"pending", "running"})


class RunRecord(TypedDict):
    """One run as stored: its identity, status, lease, attempts and wait, the application
    version it runs on (``app_version``, None for an unversioned run) and the budget in force
    (``budget``, its JSON; None when unlimited)."""

    id: str
    parent_id: str | None
    spawn_name: str | None
    name: str
    status: str
    provider: str
    app_version: str | None
    config: str
    result: str | None
    lease_owner: str | None
    lease_token: int
    lease_expires_at: str | None
    last_seq: int
    attempts: int
    next_attempt_at: str | None
    last_error: str | None
    wait_kind: str | None
    wait_ref: str | None
    wait_until: str | None
    budget: str | None
    created_at: str
    updated_at: str


RUN_COLUMNS: Final = tuple(RunRecord.__annotations__)
RUN_SEALED: Final = tuple(RUN_COLUMNS.index(c) for c in ("config", "result", "last_error"))
"""The positions in :data:`RUN_COLUMNS` of the columns an encrypted store seals."""

TimeDecoder = Callable[[Any], datetime]
"""How a backend's stored timestamp becomes an aware datetime: SQLite's text through
``zincir._time.from_db``; PostgreSQL's timestamptz arrives decoded (:func:`driver_time`)."""


def driver_time(value: Any) -> datetime:
    """A timestamp the driver already decoded (PostgreSQL's timestamptz)."""
    return cast(datetime, value)


def optional_time(value: Any, time: TimeDecoder) -> datetime | None:
    """A nullable stored timestamp, decoded by ``time``."""
    return None if value is None else time(value)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's append-only log."""

    run_id: str
    seq: int
    type: str
    payload: Any
    created_at: datetime


def event_record(run_id: str, row: Sequence[Any], time: TimeDecoder = driver_time) -> Event:
    """An ``events`` row selected as (seq, type, payload, created_at) as an Event."""
    seq, kind, payload, created = row
    return Event(run_id, int(seq), str(kind), loads_strict(payload), time(created))


class NewEvent(NamedTuple):
    """An event to append: its type, its payload as JSON text, and the tool call it is about."""

    type: str
    payload_json: str
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseEntry:
    """A model response for the log: its ``llm_call`` payload and one ``tool_call`` intent
    (call id, arguments JSON) per tool call it asks for."""

    response_json: str
    intents: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultEntry:
    """The ``tool_result`` payload of a pending tool intent."""

    call_id: str
    result_json: str


LogEntry = ResponseEntry | ToolResultEntry
"""What an agent loop logs: a model response with its intents, or a tool's result."""


@dataclass(slots=True)
class Lease:
    """The lease a context holds on a run: every write it makes is fenced by owner and token."""

    run_id: str
    owner: str
    token: int
    ttl: timedelta

    def expiry(self, now: datetime) -> str:
        """The stored expiry of a lease renewed at ``now``."""
        return to_db(now + self.ttl)


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """A semantic checkpoint: its candidate, the verifier's decision and its lineage."""

    id: int
    round: int
    status: str
    candidate: Any
    evidence: Any
    lineage_seq: int
    proposed_seq: int
    decided_seq: int | None
    decided_at: datetime | None


CHECKPOINT_COLUMNS: Final = (
    "id, round, status, state, evidence, lineage_seq, proposed_seq, decided_seq, decided_at"
)
"""The ``checkpoints`` columns :func:`checkpoint_record` reads, in order."""
CHECKPOINT_SEALED: Final = (3, 4)
"""The positions in :data:`CHECKPOINT_COLUMNS` of ``state`` and ``evidence`` (sealed)."""


def checkpoint_record(row: Sequence[Any], time: TimeDecoder = driver_time) -> CheckpointRecord:
    """A ``checkpoints`` row selected as :data:`CHECKPOINT_COLUMNS`, its JSON decoded."""
    cid, round_no, status, state, evidence, lineage, proposed, decided, decided_at = row
    return CheckpointRecord(
        int(cid),
        int(round_no),
        str(status),
        loads_strict(state),
        None if evidence is None else loads_strict(evidence),
        int(lineage),
        int(proposed),
        None if decided is None else int(decided),
        optional_time(decided_at, time),
    )


@dataclass(frozen=True, slots=True)
class RunState:
    """A run's status and config, its latest accepted checkpoint and the events after it."""

    run_id: str
    status: str
    config: Any
    last_seq: int
    checkpoint: CheckpointRecord | None
    events: list[Event]


def merge_by_seq(
    archived: list[S], live: list[S], seq: Callable[[S], int], limit: int | None
) -> list[S]:
    """A run's log (events or read-only rows) in seq order from its archived and live parts,
    at most ``limit`` of them."""
    merged = list(heapq.merge(archived, live, key=seq))
    return merged if limit is None else merged[:limit]


def event_seq(event: Event) -> int:
    """An event's seq (the order :func:`merge_by_seq` merges in)."""
    return event.seq
