"""The Store protocol: every operation the layers above ask of a backend, named and typed.

``StoreOps`` (``_store_ops.py``) implements all of it once, over each backend's rule seam
(``store/sqlite/``, ``store/postgres/``), and nothing above ``store/`` holds a statement or a
driver object. Writes that belong to a run take its ``Lease`` and
are fenced inside their own transaction: a fenced owner's write raises (``FencedOut``,
``RunTerminal``, ``RunNotFound``) with nothing stored. Driver errors surface as
``StoreError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast, runtime_checkable

from .._errors import InvalidInput
from .._time import Clock
from ._forks import RunOrigin
from ._langgraph_records import (
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    NewGraphCheckpoint,
    ThreadLease,
)
from ._lifecycle import CompactReport, PruneReport
from ._operation_records import (
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
)
from ._queues import QueueDepth, QueuedRun, QueueSettings
from ._rate_limits import BucketRates
from ._records import (
    CheckpointRecord,
    Event,
    Lease,
    LogEntry,
    NewEvent,
    RunRecord,
    RunState,
)
from ._restart_records import ApprovalRow, NewApproval, RestartRow
from ._schedules import Declared, ScheduleRecord, ScheduleSpec
from ._streams import NewStreamItem, StreamItemRow
from ._workflow_records import (
    ChildOutcome,
    ChildResult,
    ReceivedMessage,
    StepClaim,
    TimerRecord,
    WaitAttempt,
)

__all__ = ["READS", "Store", "as_store"]


@runtime_checkable
class Store(Protocol):
    """A durable store of runs, their logs, checkpoints, steps, messages and operations."""

    backend: str
    path: str
    clock: Clock

    def now(self) -> datetime: ...
    async def close(self) -> None: ...
    def hold_lease(self, lease: Lease) -> None: ...
    def drop_lease(self, lease: Lease) -> None: ...
    def lease_for(self, run_id: str) -> Lease | None: ...
    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool: ...

    # -- runs, leases and the log ---------------------------------------------------------

    async def create_run(
        self,
        run_id: str,
        *,
        name: str,
        owner: str,
        ttl: timedelta,
        provider: str = "",
        config_json: str = "{}",
        parent_id: str | None = None,
        app_version: str | None = None,
    ) -> Lease: ...
    async def open_run(
        self,
        run_id: str,
        *,
        name: str,
        owner: str,
        ttl: timedelta,
        config_json: str = "{}",
        app_version: str | None = None,
    ) -> Lease: ...
    async def acquire_run(
        self, run_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> Lease: ...
    async def renew_lease(self, lease: Lease) -> bool: ...
    async def release_lease(self, lease: Lease) -> bool: ...
    async def finish_run(
        self, lease: Lease, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None: ...
    async def append_events(self, lease: Lease, events: Sequence[NewEvent]) -> int: ...
    async def set_app_version(self, lease: Lease, version: str) -> int: ...
    async def record_budget(self, lease: Lease, budget_json: str) -> int: ...
    async def set_run_wait(
        self,
        lease: Lease,
        kind: str | None,
        ref: str | None = None,
        until: datetime | None = None,
    ) -> None: ...
    async def cancel_run(
        self, run_id: str, *, reason: str | None = None, cascade: bool = False
    ) -> list[str]: ...
    async def prune_runs(
        self, *, before: datetime, statuses: Collection[str], max_events: int
    ) -> PruneReport: ...
    async def append_operator_event(self, run_id: str, kind: str, payload_json: str) -> int: ...
    async def compact_run(self, run_id: str, *, max_events: int) -> CompactReport: ...
    async def get_run(self, run_id: str) -> RunRecord | None: ...
    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[RunRecord]: ...
    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]: ...

    # -- model responses, tool intents and semantic checkpoints ---------------------------

    async def record_response(
        self,
        lease: Lease,
        response_json: str,
        intents: Sequence[tuple[str, str]],
        *,
        durable: bool = True,
    ) -> int: ...
    async def record_tool_result(
        self, lease: Lease, call_id: str, result_json: str, *, durable: bool = True
    ) -> int: ...
    async def open_intents(self, run_id: str) -> list[Any]: ...
    async def propose_checkpoint(
        self, lease: Lease, candidate: Mapping[str, Any], state_json: str
    ) -> CheckpointRecord: ...
    async def decide_checkpoint(
        self, lease: Lease, checkpoint: CheckpointRecord, accepted: bool, evidence: Any
    ) -> int: ...
    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None: ...
    async def load_state(self, run_id: str) -> RunState: ...

    # -- claims of abandoned runs (ResumeWorker) ------------------------------------------
    # ``app_versions`` (a pinned worker) claims only runs whose app_version is one of them;
    # an unversioned run matches none. None claims runs of any version. ``names`` claims
    # only runs with one of those names (None: any name).

    async def claim_runs(
        self,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        max_attempts: int | None,
        backoff: Callable[[int], timedelta],
        app_versions: Collection[str] | None = None,
        names: Collection[str] | None = None,
    ) -> list[Lease]: ...
    async def run_is_finished(self, run_id: str) -> bool: ...
    async def settle_attempt(
        self,
        lease: Lease,
        error: str | None,
        *,
        max_attempts: int | None,
        backoff: Callable[[int], timedelta],
    ) -> None: ...

    # -- workflows: steps, timers, waits, messages, child runs ----------------------------

    async def claim_step(self, lease: Lease, name: str) -> StepClaim: ...
    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int: ...
    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        """``finish_step``, and in the same transaction ``lease``'s claim on step
        ``next_name`` (a claim ahead); False when that step already has a row."""
        ...

    async def abandon_step(self, lease: Lease, name: str) -> bool: ...
    async def recover_steps(
        self, lease: Lease, *, in_flight: Collection[str] = ()
    ) -> list[str]: ...
    async def get_timer(self, run_id: str, name: str) -> TimerRecord | None: ...
    async def sleep_attempt(
        self, lease: Lease, name: str, duration: timedelta
    ) -> WaitAttempt[None]: ...
    async def send_message(
        self, to_run_id: str, topic: str, payload_json: str, *, key: str | None = None
    ) -> int: ...
    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int: ...
    async def replayed_receive(
        self, run_id: str, recv_key: str
    ) -> WaitAttempt[ReceivedMessage | None] | None: ...
    async def receive_attempt(
        self, lease: Lease, topic: str, recv_key: str, timeout: timedelta | None
    ) -> WaitAttempt[ReceivedMessage | None]: ...
    async def message_ready(self, run_id: str, topic: str) -> bool: ...
    async def spawn_child(
        self,
        lease: Lease,
        spawn_name: str,
        *,
        child_id: str,
        run_name: str,
        config_json: str = "{}",
    ) -> str: ...
    async def child_outcome(self, run_id: str, child_id: str) -> ChildOutcome: ...
    async def join_attempt(self, lease: Lease, child_id: str) -> WaitAttempt[ChildResult]: ...

    # -- operation records ----------------------------------------------------------------
    # Under ``lease`` (the one this process holds on the operation's run) a claim is fenced
    # and records that lease, and a finish appends ``operation_completed`` in its
    # transaction; without one the record is stored and no run's log is written. A claim
    # whose lease no longer holds its run (a newer token, released or expired, the run
    # finished) is dead at once: the next claimer takes it over, counting an attempt,
    # without waiting for its expiry. A claim made without a lease lives until it expires.

    async def get_operation(self, key: OperationKey) -> OperationRow | None: ...
    async def get_operation_as_stored(self, key: OperationKey) -> OperationRow | None:
        """:meth:`get_operation` with the record as stored: ``null`` for an input the store
        keeps apart (a runtime replaying the invocation holds it and checks its digest)."""
        ...

    async def claim_operation(
        self,
        operation: NewOperation,
        *,
        owner: str,
        ttl: timedelta,
        owner_prefix: str | None = None,
        lease: Lease | None = None,
    ) -> OperationClaim: ...
    async def renew_operation_claim(
        self, key: OperationKey, *, owner: str, ttl: timedelta, lease: Lease | None = None
    ) -> bool: ...
    async def count_operation_attempt(
        self, key: OperationKey, *, owner: str, ttl: timedelta, lease: Lease | None = None
    ) -> OperationRow | None: ...
    async def release_operation_claim(self, key: OperationKey, *, owner: str) -> bool: ...
    async def finish_operation(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        *,
        owner: str,
        lease: Lease | None = None,
        log: Sequence[LogEntry] = (),
    ) -> OperationRow | None: ...
    async def finish_operation_claiming(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        ahead: Sequence[tuple[NewOperation, str]],
        *,
        owner: str,
        ttl: timedelta,
        lease: Lease,
        log: Sequence[LogEntry] = (),
    ) -> tuple[OperationRow | None, frozenset[OperationKey]]: ...
    async def save_operation_record(
        self, operation: NewOperation, outcome: OperationOutcome, *, lease: Lease | None = None
    ) -> OperationRow | None: ...

    # -- restart checkpoints ----------------------------------------------------------------
    # How far application code consumed a run's replay, per (run id, checkpoint id). A run id
    # here need not name a zincir run. Revisions only move forward: saving the stored
    # revision with the stored payload is a no-op; an older revision, or the same revision
    # with another payload, raises RevisionConflict and changes nothing.

    async def load_restart_checkpoint(
        self, run_id: str, checkpoint_id: str
    ) -> RestartRow | None: ...
    async def save_restart_checkpoint(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartRow: ...
    async def remove_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> bool: ...
    async def list_restart_checkpoints(self, run_id: str) -> list[RestartRow]: ...

    # -- approvals a person answers later ---------------------------------------------------
    # A paused durable run opens one approval per paused call, with its ``agent_paused``
    # event, under the run's lease. A decision is recorded once, from any process; it sends
    # the run an ``APPROVAL_TOPIC`` message in the same transaction so that a parked run
    # becomes claimable.

    async def open_approvals(
        self, lease: Lease, approvals: Sequence[NewApproval], events: Sequence[NewEvent] = ()
    ) -> list[ApprovalRow]: ...
    async def get_approval(self, approval_id: str) -> ApprovalRow | None: ...
    async def list_approvals(
        self, run_id: str | None = None, *, pending: bool = True
    ) -> list[ApprovalRow]: ...
    async def settle_approval(
        self,
        lease: Lease,
        call_id: str,
        decision_json: str,
        events: Sequence[NewEvent] = (),
        *,
        edited_args_sha256: str | None = None,
        decided_by: str | None = None,
    ) -> None: ...
    async def decide_approval(
        self,
        approval_id: str,
        decision_json: str,
        *,
        args_sha256: str | None = None,
        edited_args_sha256: str | None = None,
        decided_by: str | None = None,
    ) -> ApprovalRow: ...

    # -- LangGraph checkpoints ----------------------------------------------------------------
    # A LangGraph thread's checkpoints and the pending writes of the tasks run from each, per
    # (thread id, namespace, checkpoint id), for ``zincir.integrations.langgraph``. A checkpoint
    # is one transaction and so is a task's writes. Every write that changes a thread is
    # fenced by the thread's lease inside its transaction: under ``lease`` its token must still
    # be current (FencedOut otherwise); without one, no other owner may hold a live lease
    # (LeaseHeld). A refused write stores nothing.

    async def put_graph_checkpoint(
        self, checkpoint: NewGraphCheckpoint, *, lease: ThreadLease | None = None
    ) -> None: ...
    async def put_graph_checkpoint_params(
        self, params: tuple[Any, ...], *, lease: ThreadLease | None = None
    ) -> None: ...
    async def put_graph_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[GraphWrite],
        *,
        lease: ThreadLease | None = None,
    ) -> None: ...
    async def get_graph_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None: ...
    async def list_graph_checkpoints(
        self, query: GraphCheckpointQuery
    ) -> list[GraphCheckpointRow]: ...
    async def delete_graph_thread(
        self, thread_id: str, *, lease: ThreadLease | None = None
    ) -> int: ...
    async def copy_graph_thread(
        self, source_thread_id: str, target_thread_id: str, *, lease: ThreadLease | None = None
    ) -> int: ...
    async def delete_graph_runs(
        self, run_ids: Sequence[str], *, leases: Sequence[ThreadLease] = ()
    ) -> int: ...
    async def prune_graph_threads(
        self,
        thread_ids: Sequence[str],
        *,
        keep_latest: bool,
        leases: Sequence[ThreadLease] = (),
    ) -> int: ...
    async def acquire_thread_lease(
        self, thread_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> ThreadLease: ...
    async def renew_thread_lease(self, lease: ThreadLease) -> bool: ...
    async def release_thread_lease(self, lease: ThreadLease) -> bool: ...

    # -- a run's durable stream and its trace context -------------------------------------
    # Items a client reads from an offset (``zincir.streams``): an append under the run's
    # lease is fenced and gives its items the next offsets (1, 2, 3 ... gapless as written);
    # an item whose key the run's stream holds is skipped (no offset used). A run's trace
    # context (a W3C traceparent) is stored once: the first save wins.

    async def append_stream(
        self, lease: Lease, items: Sequence[NewStreamItem], *, durable: bool = True
    ) -> list[int]: ...
    async def read_stream(
        self, run_id: str, after: int, limit: int = 500
    ) -> list[StreamItemRow]: ...
    async def stream_tail(self, run_id: str) -> StreamItemRow | None: ...
    async def save_trace_context(self, run_id: str, traceparent: str) -> str: ...
    async def load_trace_context(self, run_id: str) -> str | None: ...

    # -- provider rate limits -----------------------------------------------------------
    # One row per key shared by every process: a request reserves its slot, a 429 blocks.

    async def take_rate_limit(
        self,
        key: str,
        rates: BucketRates,
        tokens: float,
        run_id: str | None = None,
        *,
        again: bool = False,
    ) -> float: ...
    async def settle_rate_limit(self, key: str, tokens_per_second: float, extra: float) -> None: ...
    async def block_rate_limit(self, key: str, rates: BucketRates, seconds: float) -> datetime: ...

    # -- forks ----------------------------------------------------------------------------
    # A fork holds its source's history before ``at_seq`` and nobody owns it; the source is
    # only read. ``run_origins`` records where each forked run came from.

    async def fork_run(
        self,
        source_run_id: str,
        *,
        at_seq: int,
        new_run_id: str,
        config_json: str | None = None,
        name: str | None = None,
        kind: str = "fork",
    ) -> RunRecord: ...
    async def run_origin(self, run_id: str) -> RunOrigin | None: ...
    async def forks_of(self, run_id: str) -> list[RunOrigin]: ...

    # -- queues ---------------------------------------------------------------------------
    # A queued run waits (pending) until a serving process admits it within its queue's
    # limits; ``queues`` holds each queue's settings.

    async def store_queue(self, settings: QueueSettings) -> None: ...
    async def enqueue_run(
        self,
        run_id: str,
        settings: QueueSettings,
        *,
        name: str,
        provider: str = "",
        config_json: str = "{}",
        key: str | None = None,
        priority: int = 0,
        dedupe_id: str | None = None,
        app_version: str | None = None,
    ) -> tuple[str, bool]: ...
    async def admit_queued(self, names: Collection[str] | None, limit: int) -> list[str]: ...
    async def claim_queued_runs(
        self,
        owner: str,
        ttl: timedelta,
        limit: int,
        *,
        max_attempts: int | None,
        backoff: Callable[[int], timedelta],
        app_versions: Collection[str] | None = None,
        names: Collection[str] | None = None,
    ) -> list[Lease]: ...
    async def start_queued_run(self, run_id: str) -> bool: ...
    async def queue_depths(self) -> list[QueueDepth]: ...
    async def queued_runs(self, run_ids: Sequence[str]) -> dict[str, QueuedRun]: ...

    # -- schedules -------------------------------------------------------------------------

    async def declare_schedule(
        self, spec: ScheduleSpec, queue: QueueSettings | None = None
    ) -> Declared: ...
    async def get_schedule(self, name: str) -> ScheduleRecord | None: ...
    async def list_schedules(self) -> list[ScheduleRecord]: ...
    async def pause_schedule(self, name: str, paused: bool) -> bool | None: ...
    async def delete_schedule(self, name: str) -> bool: ...
    async def start_schedule_tick(
        self,
        name: str,
        *,
        cron: str,
        timezone: str,
        tick: datetime,
        run_id: str,
        config_json: str,
        provider: str = "",
        app_version: str | None = None,
    ) -> bool: ...


READS: frozenset[str] = frozenset(
    {
        "get_run",
        "list_runs",
        "list_events",
        "open_intents",
        "proposed_checkpoint",
        "load_state",
        "run_is_finished",
        "get_timer",
        "replayed_receive",
        "message_ready",
        "child_outcome",
        "get_operation",
        "get_operation_as_stored",
        "load_restart_checkpoint",
        "list_restart_checkpoints",
        "get_approval",
        "list_approvals",
        "get_graph_checkpoint",
        "list_graph_checkpoints",
        "read_stream",
        "stream_tail",
        "load_trace_context",
        "run_origin",
        "forks_of",
        "queue_depths",
        "queued_runs",
        "get_schedule",
        "list_schedules",
    }
)
"""The operations that only read; every other ``async`` operation of :class:`Store` writes
(``check-compat``'s dry replay passes these through and refuses the rest)."""

_STORE_CLASSES: set[type] = set()
"""Classes whose instances passed the structural check (it walks every protocol member)."""


def as_store(value: object, what: str = "store") -> Store:
    """``value`` as a Store, else InvalidInput naming ``what`` (every layer checks it so)."""
    if type(value) in _STORE_CLASSES:
        return cast(Store, value)
    if not isinstance(value, Store):
        raise InvalidInput(
            f"{what} must be a zincir store (open_store), not {type(value).__name__}"
        )
    _STORE_CLASSES.add(type(value))
    return value
