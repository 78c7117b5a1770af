"""A Store that replays one run's log and refuses every write: the dry mode of
``zincir check-compat``.

:class:`DryStore` wraps a store it only reads. The run it checks is "taken over" under a
lease that is never written; recorded work is answered from the log (a completed step's
result, a completed operation's record, a fired timer, a recorded send, spawn or join), and
anything else that would write (an unrecorded step or operation, a model response, a wait,
the run's completion) raises :class:`ReplayStopped`, a BaseException user code cannot
swallow, before it happens. An unrecorded step or operation asked for while recorded work
remains that the code has not asked for yet raises ``VersionDivergence`` instead, the same
error a real replay raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from .._errors import RunExists, VersionDivergence
from ..store import (
    ApprovalRow,
    CheckpointRecord,
    ChildOutcome,
    ChildResult,
    CompactReport,
    Event,
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    Lease,
    LogEntry,
    NewApproval,
    NewEvent,
    NewGraphCheckpoint,
    NewOperation,
    OperationClaim,
    OperationKey,
    OperationOutcome,
    OperationRow,
    PruneReport,
    ReceivedMessage,
    RestartRow,
    RunRecord,
    RunState,
    StepClaim,
    Store,
    ThreadLease,
    TimerRecord,
    WaitAttempt,
)

__all__ = ["DryStore", "RecordedWork", "ReplayStopped"]

_SETTLE_TURNS = 8  # event-loop turns a gather's other branches get to ask before a judgement


class ReplayStopped(BaseException):
    """The dry replay reached something the log does not hold: ``what`` it would do."""

    def __init__(self, what: str, *, new_work: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.new_work = new_work


class RecordedWork:
    """What one run's log holds for a replay, and what the code has asked for of it.

    Work items are named as a real replay names them: ``step 'NAME'`` and
    ``operation STEP_ID #SEQUENCE``, in log order.
    """

    def __init__(self, run_id: str, events: Sequence[Event], steps: Mapping[str, Any]) -> None:
        self.run_id = run_id
        self.order: list[str] = []
        self.sends: dict[str, int] = {}
        self.spawns: dict[str, str] = {}
        self._steps = dict(steps)
        self._asked: set[str] = set()
        for event in events:
            payload = event.payload if isinstance(event.payload, dict) else {}
            if event.type == "step_completed":
                self._note(step_name(str(payload.get("name"))))
            elif event.type == "operation_completed":
                key = OperationKey(run_id, str(payload.get("step_id")), int(payload["sequence"]))
                self._note(operation_name(key))
            elif event.type == "message_sent":
                self.sends[str(payload.get("key"))] = int(payload["message_id"])
            elif event.type == "child_spawned":
                self.spawns[str(payload.get("name"))] = str(payload.get("child_id"))

    def _note(self, item: str) -> None:
        if item not in self.order:
            self.order.append(item)

    @property
    def replayed(self) -> int:
        """How many recorded items the code asked for."""
        return sum(1 for item in self.order if item in self._asked)

    def unreplayed(self) -> list[str]:
        """The recorded items the code has not asked for, in log order."""
        return [item for item in self.order if item not in self._asked]

    def ask(self, item: str) -> bool:
        """Note that the code asked for ``item``; True when the log recorded it."""
        self._asked.add(item)
        return item in self.order

    def step_result(self, name: str) -> tuple[bool, Any]:
        """(True, result) for a step the log completed, else (False, None)."""
        item = step_name(name)
        if item in self.order and name in self._steps:
            self._asked.add(item)
            return True, self._steps[name]
        return False, None

    async def judge(self, attempted: str) -> None:
        """``attempted`` is unrecorded work: VersionDivergence while recorded items remain
        that the code has not asked for (once a gather's other branches had their turn),
        else the replay reached new work."""
        self._asked.add(attempted)
        for _ in range(_SETTLE_TURNS):
            if not self.unreplayed():
                break
            await asyncio.sleep(0)
        left = self.unreplayed()
        if left:
            raise VersionDivergence(
                run_id=self.run_id,
                position=self.order.index(left[0]),
                recorded=left[0],
                attempted=attempted,
            )
        raise ReplayStopped(attempted, new_work=True)


def step_name(name: str) -> str:
    return f"step {name!r}"


def operation_name(key: OperationKey) -> str:
    return f"operation {key.step_id} #{key.sequence}"


class DryStore:
    """Replays the run of ``lease`` from ``inner`` (only read) and refuses every write."""

    def __init__(self, inner: Store, lease: Lease, recorded: RecordedWork, path: str) -> None:
        self.inner = inner
        self.lease = lease
        self.recorded = recorded
        self.backend = inner.backend
        self.path = path
        self.clock = inner.clock
        self._held: dict[str, Lease] = {}

    def _stop(self, what: str) -> ReplayStopped:
        return ReplayStopped(what)

    def _ours(self, run_id: str) -> bool:
        return run_id == self.lease.run_id

    def now(self) -> datetime:
        return self.inner.now()

    async def close(self) -> None:
        """Nothing to close: the caller owns the store it wraps."""

    def hold_lease(self, lease: Lease) -> None:
        self._held[lease.run_id] = lease

    def drop_lease(self, lease: Lease) -> None:
        if self._held.get(lease.run_id) == lease:
            del self._held[lease.run_id]

    def lease_for(self, run_id: str) -> Lease | None:
        return self._held.get(run_id)

    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool:
        raise self._stop("waits for a wake-up")

    # -- runs, leases and the log -----------------------------------------------------------

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
    ) -> Lease:
        if self._ours(run_id):
            raise RunExists("a run with this id already exists", run_id=run_id)
        raise self._stop(f"creates run {run_id!r}")

    async def open_run(
        self,
        run_id: str,
        *,
        name: str,
        owner: str,
        ttl: timedelta,
        config_json: str = "{}",
        app_version: str | None = None,
    ) -> Lease:
        if self._ours(run_id):
            return self.lease
        raise self._stop(f"opens run {run_id!r}")

    async def acquire_run(
        self, run_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> Lease:
        if self._ours(run_id):
            return self.lease
        raise self._stop(f"takes over run {run_id!r}")

    async def renew_lease(self, lease: Lease) -> bool:
        return lease == self.lease

    async def release_lease(self, lease: Lease) -> bool:
        return lease == self.lease  # nothing is written: the run's real lease is untouched

    async def finish_run(
        self, lease: Lease, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None:
        raise self._stop("completes the run" if status == "completed" else f"marks it {status}")

    async def cancel_run(
        self, run_id: str, *, reason: str | None = None, cascade: bool = False
    ) -> list[str]:
        raise self._stop(f"cancels run {run_id!r}")

    async def prune_runs(
        self, *, before: datetime, statuses: Collection[str], max_events: int
    ) -> PruneReport:
        raise self._stop("prunes runs")

    async def append_operator_event(self, run_id: str, kind: str, payload_json: str) -> int:
        raise self._stop(f"adds {kind} to run {run_id!r}")

    async def compact_run(self, run_id: str, *, max_events: int) -> CompactReport:
        raise self._stop(f"compacts run {run_id!r}")

    async def append_events(self, lease: Lease, events: Sequence[NewEvent]) -> int:
        kinds = ", ".join(event.type for event in events) or "nothing"
        raise self._stop(f"appends {kinds}")

    async def record_budget(self, lease: Lease, budget_json: str) -> int:
        raise self._stop("sets the run's budget")

    async def set_app_version(self, lease: Lease, version: str) -> int:
        raise self._stop(f"moves the run to version {version!r}")

    async def set_run_wait(
        self,
        lease: Lease,
        kind: str | None,
        ref: str | None = None,
        until: datetime | None = None,
    ) -> None:
        raise self._stop(f"waits on {kind} {ref!r}" if kind else "clears its wait")

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, limit: int = 100, status: str | None = None) -> list[RunRecord]:
        return await self.inner.list_runs(limit, status)

    async def list_events(
        self, run_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        return await self.inner.list_events(run_id, after_seq, limit)

    # -- model responses, tool intents and semantic checkpoints -----------------------------

    async def record_response(
        self,
        lease: Lease,
        response_json: str,
        intents: Sequence[tuple[str, str]],
        *,
        durable: bool = True,
    ) -> int:
        raise self._stop("records a model response")

    async def record_tool_result(
        self, lease: Lease, call_id: str, result_json: str, *, durable: bool = True
    ) -> int:
        raise self._stop(f"records the result of tool call {call_id!r}")

    async def open_intents(self, run_id: str) -> list[Any]:
        return await self.inner.open_intents(run_id)

    async def propose_checkpoint(
        self, lease: Lease, candidate: Mapping[str, Any], state_json: str
    ) -> CheckpointRecord:
        raise self._stop("proposes a checkpoint")

    async def decide_checkpoint(
        self, lease: Lease, checkpoint: CheckpointRecord, accepted: bool, evidence: Any
    ) -> int:
        raise self._stop(f"decides checkpoint {checkpoint.id}")

    async def proposed_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        return await self.inner.proposed_checkpoint(run_id)

    async def load_state(self, run_id: str) -> RunState:
        return await self.inner.load_state(run_id)

    # -- claims -----------------------------------------------------------------------------

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
    ) -> list[Lease]:
        raise self._stop("claims runs")

    async def run_is_finished(self, run_id: str) -> bool:
        return await self.inner.run_is_finished(run_id)

    async def settle_attempt(
        self,
        lease: Lease,
        error: str | None,
        *,
        max_attempts: int | None,
        backoff: Callable[[int], timedelta],
    ) -> None:
        raise self._stop("settles an attempt")

    # -- workflows --------------------------------------------------------------------------

    async def claim_step(self, lease: Lease, name: str) -> StepClaim:
        done, result = self.recorded.step_result(name)
        if done:
            return StepClaim("completed", result)
        await self.recorded.judge(step_name(name))
        raise AssertionError("judge always raises")  # pragma: no cover

    async def finish_step(self, lease: Lease, name: str, result_json: str) -> int:
        raise self._stop(f"stores the result of step {name!r}")

    async def finish_step_and_claim(
        self, lease: Lease, name: str, result_json: str, next_name: str
    ) -> bool:
        raise self._stop(f"stores the result of step {name!r}")

    async def abandon_step(self, lease: Lease, name: str) -> bool:
        return False  # no claim was ever made

    async def recover_steps(self, lease: Lease, *, in_flight: Collection[str] = ()) -> list[str]:
        raise self._stop("releases unfinished step claims")

    async def get_timer(self, run_id: str, name: str) -> TimerRecord | None:
        return await self.inner.get_timer(run_id, name)

    async def sleep_attempt(
        self, lease: Lease, name: str, duration: timedelta
    ) -> WaitAttempt[None]:
        timer = await self.inner.get_timer(lease.run_id, name)
        if timer is not None and timer.completed:
            return WaitAttempt(True, None, timer.wake_at)
        raise self._stop(f"sleeps on timer {name!r}")

    async def send_message(
        self, to_run_id: str, topic: str, payload_json: str, *, key: str | None = None
    ) -> int:
        raise self._stop(f"sends {topic!r} to run {to_run_id!r}")

    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int:
        sent = self.recorded.sends.get(send_key)
        if sent is not None:
            return sent
        raise self._stop(f"sends {topic!r} to run {to_run_id!r}")

    async def replayed_receive(
        self, run_id: str, recv_key: str
    ) -> WaitAttempt[ReceivedMessage | None] | None:
        return await self.inner.replayed_receive(run_id, recv_key)

    async def receive_attempt(
        self, lease: Lease, topic: str, recv_key: str, timeout: timedelta | None
    ) -> WaitAttempt[ReceivedMessage | None]:
        raise self._stop(f"receives a message on {topic!r}")

    async def message_ready(self, run_id: str, topic: str) -> bool:
        return await self.inner.message_ready(run_id, topic)

    async def spawn_child(
        self,
        lease: Lease,
        spawn_name: str,
        *,
        child_id: str,
        run_name: str,
        config_json: str = "{}",
    ) -> str:
        spawned = self.recorded.spawns.get(spawn_name)
        if spawned is not None:
            return spawned
        raise self._stop(f"spawns child {spawn_name!r}")

    async def child_outcome(self, run_id: str, child_id: str) -> ChildOutcome:
        return await self.inner.child_outcome(run_id, child_id)

    async def join_attempt(self, lease: Lease, child_id: str) -> WaitAttempt[ChildResult]:
        outcome = await self.inner.child_outcome(lease.run_id, child_id)
        if outcome.child.status in ("completed", "failed", "cancelled"):
            return WaitAttempt(True, outcome.child)
        raise self._stop(f"waits for child run {child_id!r}")

    # -- operation records ------------------------------------------------------------------

    async def get_operation(self, key: OperationKey) -> OperationRow | None:
        row = await self.inner.get_operation(key)
        if row is not None and row.status == "completed" and self._ours(key.run_id):
            self.recorded.ask(operation_name(key))
        return row

    async def get_operation_as_stored(self, key: OperationKey) -> OperationRow | None:
        row = await self.inner.get_operation_as_stored(key)
        if row is not None and row.status == "completed" and self._ours(key.run_id):
            self.recorded.ask(operation_name(key))
        return row

    async def claim_operation(
        self,
        operation: NewOperation,
        *,
        owner: str,
        ttl: timedelta,
        owner_prefix: str | None = None,
        lease: Lease | None = None,
    ) -> OperationClaim:
        if self._ours(operation.key.run_id):
            await self.recorded.judge(operation_name(operation.key))
        raise self._stop(f"runs {operation_name(operation.key)} of run {operation.key.run_id!r}")

    async def renew_operation_claim(
        self, key: OperationKey, *, owner: str, ttl: timedelta, lease: Lease | None = None
    ) -> bool:
        return False

    async def count_operation_attempt(
        self, key: OperationKey, *, owner: str, ttl: timedelta, lease: Lease | None = None
    ) -> OperationRow | None:
        raise self._stop(f"counts an attempt of {operation_name(key)}")

    async def release_operation_claim(self, key: OperationKey, *, owner: str) -> bool:
        return False

    async def finish_operation(
        self,
        operation: NewOperation,
        outcome: OperationOutcome,
        *,
        owner: str,
        lease: Lease | None = None,
        log: Sequence[LogEntry] = (),
    ) -> OperationRow | None:
        raise self._stop(f"stores the record of {operation_name(operation.key)}")

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
    ) -> tuple[OperationRow | None, frozenset[OperationKey]]:
        raise self._stop(f"stores the record of {operation_name(operation.key)}")

    async def save_operation_record(
        self, operation: NewOperation, outcome: OperationOutcome, *, lease: Lease | None = None
    ) -> OperationRow | None:
        raise self._stop(f"stores the record of {operation_name(operation.key)}")

    # -- restart checkpoints ----------------------------------------------------------------

    async def load_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> RestartRow | None:
        return await self.inner.load_restart_checkpoint(run_id, checkpoint_id)

    async def save_restart_checkpoint(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartRow:
        raise self._stop(f"saves restart checkpoint {checkpoint_id!r}")

    async def remove_restart_checkpoint(self, run_id: str, checkpoint_id: str) -> bool:
        raise self._stop(f"removes restart checkpoint {checkpoint_id!r}")

    async def list_restart_checkpoints(self, run_id: str) -> list[RestartRow]:
        return await self.inner.list_restart_checkpoints(run_id)

    # -- approvals --------------------------------------------------------------------------

    async def open_approvals(
        self, lease: Lease, approvals: Sequence[NewApproval], events: Sequence[NewEvent] = ()
    ) -> list[ApprovalRow]:
        raise self._stop("pauses for approvals")

    async def get_approval(self, approval_id: str) -> ApprovalRow | None:
        return await self.inner.get_approval(approval_id)

    async def list_approvals(
        self, run_id: str | None = None, *, pending: bool = True
    ) -> list[ApprovalRow]:
        return await self.inner.list_approvals(run_id, pending=pending)

    async def settle_approval(
        self, lease: Lease, call_id: str, decision_json: str, events: Sequence[NewEvent] = ()
    ) -> None:
        raise self._stop(f"settles the approval of call {call_id!r}")

    async def decide_approval(
        self, approval_id: str, decision_json: str, *, args_sha256: str | None = None
    ) -> ApprovalRow:
        raise self._stop(f"decides approval {approval_id!r}")

    # -- LangGraph checkpoints --------------------------------------------------------------

    async def put_graph_checkpoint(
        self, checkpoint: NewGraphCheckpoint, *, lease: ThreadLease | None = None
    ) -> None:
        raise self._stop("stores a LangGraph checkpoint")

    async def put_graph_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[GraphWrite],
        *,
        lease: ThreadLease | None = None,
    ) -> None:
        raise self._stop("stores LangGraph writes")

    async def get_graph_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None:
        return await self.inner.get_graph_checkpoint(thread_id, checkpoint_ns, checkpoint_id)

    async def list_graph_checkpoints(self, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
        return await self.inner.list_graph_checkpoints(query)

    async def delete_graph_thread(self, thread_id: str, *, lease: ThreadLease | None = None) -> int:
        raise self._stop(f"deletes LangGraph thread {thread_id!r}")

    async def copy_graph_thread(
        self, source_thread_id: str, target_thread_id: str, *, lease: ThreadLease | None = None
    ) -> int:
        raise self._stop(f"copies LangGraph thread {source_thread_id!r}")

    async def delete_graph_runs(
        self, run_ids: Sequence[str], *, leases: Sequence[ThreadLease] = ()
    ) -> int:
        raise self._stop("deletes LangGraph runs")

    async def prune_graph_threads(
        self,
        thread_ids: Sequence[str],
        *,
        keep_latest: bool,
        leases: Sequence[ThreadLease] = (),
    ) -> int:
        raise self._stop("prunes LangGraph threads")

    async def acquire_thread_lease(
        self, thread_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> ThreadLease:
        raise self._stop(f"takes the lease of LangGraph thread {thread_id!r}")

    async def renew_thread_lease(self, lease: ThreadLease) -> bool:
        return False

    async def release_thread_lease(self, lease: ThreadLease) -> bool:
        return False


def _is_store(store: DryStore) -> Store:
    """mypy's proof that DryStore implements every operation of the Store protocol."""
    return store
