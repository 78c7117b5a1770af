"""AgentContext: the bring-your-own-loop API over one run's lease and event log."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .._crash import crash_point
from .._errors import CheckpointError, InvalidInput, ZincirError
from .._json import dumps
from .._replay import PATCH_MARKER, Replay, forget, register
from .._validate import check_id, check_lease_ttl, check_optional_id, name_problem, printable
from ..store import CheckpointRecord, Event, Lease, NewEvent, Store, new_owner_id
from ..store._restart_records import SPIN_TOPIC
from ._budget import (
    BUDGET_TOPIC,
    EXCEEDED_EVENT,
    Budget,
    BudgetUsage,
    Moment,
    budget_json,
    check_budget_arg,
)
from ._entries import response_entry, tool_result_entry
from ._guards import Guards
from ._lease import Heartbeat
from ._spin import SPIN_EVENT, SpinRules
from ._types import (
    Checkpoint,
    CheckpointCandidate,
    CheckpointOutcome,
    DurableState,
    PendingCheckpoint,
    ToolCall,
    Verification,
)
from ._versions import app_version_or_default
from ._workspace import WorkspaceRevision, check_folder, compare, snapshot

__all__ = ["DEFAULT_LEASE_TTL", "AgentContext", "Verifier"]

Verifier = Callable[[CheckpointCandidate], Awaitable[Verification] | Verification]


DEFAULT_LEASE_TTL = timedelta(seconds=30)
log = logging.getLogger("zincir.guards")
_UNBUDGETED_READS = 1.0  # seconds between log reads of a run with no budget in force

# The contexts of this process adopted from a claim (a ResumeWorker's), by run id: an agent
# loop asked to run a run this process already owns (in the worker's handler) uses that lease.
_OPEN: weakref.WeakValueDictionary[str, AgentContext] = weakref.WeakValueDictionary()


class AgentContext:
    """Owns a run's lease while the application owns the loop.

    Every write re-checks the fencing token in its transaction and renews the lease; a
    background heartbeat renews it between writes.
    """

    def __init__(self, store: Store, lease: Lease) -> None:
        self.store = store
        self._lease = lease
        self._heartbeat = Heartbeat(store, lease)
        self._done = False
        # What earlier owners recorded and this context has replayed (none on a first lease).
        self.replay = Replay(store, lease.run_id, fresh=lease.token == 1)
        self._guards: Guards | None = None  # folded from the log on first use
        # Run before the lease is given up (a workflow's claim made ahead is released).
        self._before_release: list[Callable[[], Awaitable[None]]] = []
        self._in_use = False  # a loop of this process runs on this context's lease

    @property
    def run_id(self) -> str:
        return self._lease.run_id

    @property
    def lease_token(self) -> int:
        return self._lease.token

    @property
    def lease_owner(self) -> str:
        return self._lease.owner

    @property
    def lease(self) -> Lease:
        """The lease this context holds (shared with a WorkflowContext built on it)."""
        return self._lease

    def check_lease(self) -> None:
        """Raise LeaseLost if the heartbeat failed; every write calls it first."""
        self._heartbeat.check()

    # -- acquisition --------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        store: Store,
        name: str,
        provider: str = "",
        config: Any = None,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        run_id: str | None = None,
        *,
        parent_id: str | None = None,
        app_version: str | None = None,
        budget: Budget | None = None,
    ) -> AgentContext:
        """Create a run (status ``running``) and take its lease; with ``budget``, its
        ``budget_set`` event is the run's second.

        RunExists if ``run_id`` is taken; RunNotFound if ``parent_id`` names no run.
        ``app_version`` is the version of the code starting it (default
        ``$ZINCIR_APP_VERSION``; without either a child takes its parent's, any other run is
        unversioned).
        """
        run_id = check_id(run_id, "a run id") if run_id is not None else str(uuid.uuid4())
        ttl = check_lease_ttl(lease_ttl, run_id=run_id)
        check_id(name, "a run name", run_id=run_id)
        check_budget_arg(budget, run_id)
        if provider != "" and name_problem("provider", provider) is not None:
            raise InvalidInput(
                f"provider must be a short text label: {name_problem('provider', provider)}",
                run_id=run_id,
            )
        parent = check_optional_id(parent_id, "parent_id", run_id=run_id)
        config_json = dumps({} if config is None else config, what="config", run_id=run_id)
        lease = await store.create_run(
            run_id,
            name=name,
            owner=new_owner_id(),
            ttl=ttl,
            provider=provider,
            config_json=config_json,
            parent_id=parent,
            app_version=app_version_or_default(app_version, run_id=run_id),
        )
        ctx = cls._started(store, lease)
        if budget is not None:
            await ctx.set_budget(budget)
        return ctx

    @classmethod
    async def recover(
        cls,
        store: Store,
        run_id: str,
        *,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        budget: Budget | None = None,
    ) -> AgentContext:
        """Take over a run whose lease is absent or expired, or held by a process of this
        machine that provably died (raises LeaseHeld otherwise);
        ``budget``, when it differs from the one in force, is set (raising it resumes a run
        its budget paused)."""
        ctx = await cls._acquire(store, run_id, lease_ttl, force=False)
        if budget is not None:
            await ctx.set_budget(budget)
        return ctx

    @classmethod
    async def force_recover(
        cls, store: Store, run_id: str, *, lease_ttl: timedelta | float = DEFAULT_LEASE_TTL
    ) -> AgentContext:
        """Take over a run even from a live owner, fencing it; only once it is known dead."""
        return await cls._acquire(store, run_id, lease_ttl, force=True)

    @classmethod
    async def _acquire(
        cls, store: Store, run_id: str, lease_ttl: timedelta | float, *, force: bool
    ) -> AgentContext:
        check_id(run_id, "a run id")
        ttl = check_lease_ttl(lease_ttl, run_id=run_id)
        lease = await store.acquire_run(run_id, owner=new_owner_id(), ttl=ttl, force=force)
        return cls._started(store, lease)

    @classmethod
    def _started(cls, store: Store, lease: Lease) -> AgentContext:
        ctx = cls(store, lease)
        ctx._heartbeat.start()
        register(lease, ctx.replay)
        return ctx

    @classmethod
    def held_here(cls, store: Store, run_id: str) -> AgentContext | None:
        """The open context of this process, adopted from a claim, that holds ``run_id``'s
        lease on ``store``'s database and that no loop runs on yet, or None.

        A ResumeWorker's handler that runs the agent on the run it was handed gets that
        context's lease rather than ``LeaseHeld`` against its own worker.
        """
        ctx = _OPEN.get(run_id)
        if ctx is None or ctx._done or ctx._in_use or not _same_database(ctx.store, store):
            return None
        try:
            ctx.check_lease()
        except ZincirError:
            return None  # its lease is lost: the run is taken over the ordinary way
        return ctx

    def claim_use(self) -> None:
        """Mark that a loop runs on this context's lease: :meth:`held_here` no longer
        offers it, so a second loop on the run gets ``LeaseHeld``."""
        self._in_use = True

    def end_use(self) -> None:
        """The loop that ran on this context's lease stopped; the lease stays held."""
        self._in_use = False

    @classmethod
    def adopt(cls, store: Store, lease: Lease, *, lend: bool = True) -> AgentContext:
        """Wrap a lease acquired elsewhere (a ResumeWorker claim) and start its heartbeat.

        With ``lend``, an agent loop of this process asked to run this run uses the
        context's lease (:meth:`held_here`) instead of refusing it as held.
        """
        ctx = cls._started(store, lease)
        if lend:
            _OPEN[lease.run_id] = ctx
        return ctx

    # -- writes -------------------------------------------------------------------------

    async def record_response(
        self,
        content: Any,
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] = (),
        stop_reason: str | None = None,
        *,
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
        durable: bool = True,
    ) -> int:
        """Record a model response and every tool intent it asks for, in one transaction.

        Returns the ``llm_call`` event's seq. A repeated tool call id raises DuplicateToolCall
        and stores nothing. ``durable=False`` commits without waiting for the disk (the write
        survives a crash of the process, maybe not a power loss): only for a log you can
        rebuild, as the durable agent loop rebuilds its log from its operation records.
        """
        entry = response_entry(
            self.run_id, content, tool_calls, stop_reason, usage=usage, model=model
        )
        self._heartbeat.check()
        return await self.store.record_response(
            self._lease, entry.response_json, entry.intents, durable=durable
        )

    async def record_tool_result(
        self, call_id: str, result: Any, *, is_error: bool = False, durable: bool = True
    ) -> int:
        """Record the result of a pending tool intent; returns the event's seq.
        ``durable`` as for :meth:`record_response`."""
        entry = tool_result_entry(self.run_id, call_id, result, is_error=is_error)
        self._heartbeat.check()
        return await self.store.record_tool_result(
            self._lease, call_id, entry.result_json, durable=durable
        )

    async def checkpoint(
        self,
        candidate: CheckpointCandidate | Mapping[str, Any],
        verify: Verifier,
        *,
        workspace: str | os.PathLike[str] | None = None,
    ) -> CheckpointOutcome:
        """Persist ``candidate``, run ``verify`` on it, then persist the decision.

        ``verify`` may be async or plain. If a candidate equal to this one is pending from
        an interrupted attempt, it is verified instead of proposing a new round. With
        ``workspace`` (a folder), zincir hashes what the folder really holds into
        ``candidate.workspace``: the verifier sees it, and :meth:`check_workspace` compares
        the folder with it when the run resumes.
        """
        run_id = self.run_id
        _check_verifier(verify, run_id)
        proposal = CheckpointCandidate.coerce(candidate, run_id=run_id)
        if workspace is not None:
            folder = check_folder(workspace, run_id=run_id)
            revision = await asyncio.to_thread(snapshot, folder)
            proposal = dataclasses.replace(proposal, workspace=revision)
        body = proposal.to_json()
        state_json = dumps(body, what="checkpoint candidate", run_id=run_id)
        pending = await self.store.proposed_checkpoint(run_id)
        if pending is not None:
            if dumps(pending.candidate) != state_json:
                raise CheckpointError(
                    f"checkpoint {pending.id} (round {pending.round}) is still "
                    "pending verification; verify it with resume_checkpoint() first",
                    run_id=run_id,
                )
            return await self._decide(pending, verify)
        self._heartbeat.check()
        proposed = await self.store.propose_checkpoint(self._lease, body, state_json)
        crash_point("checkpoint.proposed")
        return await self._decide(proposed, verify)

    async def check_workspace(
        self, workspace: str | os.PathLike[str] | None = None
    ) -> WorkspaceRevision | None:
        """Check that the workspace still holds what the latest accepted checkpoint bound
        (its own folder, or ``workspace`` when it moved); WorkspaceDrift names the paths that
        differ. None when no accepted checkpoint recorded a workspace."""
        state = await self.state()
        accepted = None if state.checkpoint is None else state.checkpoint.candidate.workspace
        if accepted is None:
            return None
        folder = check_folder(accepted.path if workspace is None else workspace, run_id=self.run_id)
        current = await asyncio.to_thread(snapshot, folder)
        compare(accepted, current, self.run_id)
        return current

    async def resume_checkpoint(self, verify: Verifier) -> CheckpointOutcome | None:
        """Verify the candidate a crash left pending; None if there is none."""
        _check_verifier(verify, self.run_id)
        pending = await self.store.proposed_checkpoint(self.run_id)
        return None if pending is None else await self._decide(pending, verify)

    async def _decide(self, pending: CheckpointRecord, verify: Verifier) -> CheckpointOutcome:
        run_id = self.run_id
        verdict = verify(CheckpointCandidate.from_json(pending.candidate))
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, Verification):
            raise InvalidInput(
                f"verify must return Verification(passed, evidence), not {verdict!r}; the "
                "candidate stays pending for resume_checkpoint()",
                run_id=run_id,
            )
        accepted = bool(verdict.passed)
        dumps(verdict.evidence, what="verifier evidence", run_id=run_id)
        crash_point("checkpoint.verified")
        self._heartbeat.check()
        await self.store.decide_checkpoint(self._lease, pending, accepted, verdict.evidence)
        crash_point("checkpoint.decided")
        return CheckpointOutcome(accepted, pending.id, pending.round, verdict.evidence)

    # -- budgets and spin detection ----------------------------------------------------

    async def set_budget(self, budget: Budget) -> None:
        """Set the run's budget (a ``budget_set`` event): raised, lowered or first set.
        Unchanged from the one in force, nothing is written."""
        check_budget_arg(budget, self.run_id)
        tracker = await self._fold_guards()
        if tracker.budget == budget:
            return
        self._heartbeat.check()
        await self.store.record_budget(self._lease, budget_json(budget, self.run_id))
        tracker.budget = budget  # in force now; the next check reads the event back
        tracker.read_at = 0.0

    async def budget_usage(self) -> tuple[Budget | None, BudgetUsage]:
        """The budget in force (None: unlimited) and what the run has spent, read from its
        log: the same after any number of restarts and replays."""
        tracker = await self._fold_guards()
        return tracker.budget, tracker.usage(self.store.now())

    async def check_budget(self, before: Moment = "model") -> None:
        """Raise BudgetExceeded when the budget stops the next action: a model request
        (``"model"``), running logged tool calls (``"tools"``) or a step (``"step"``). The run
        is first paused (parked until :func:`zincir.set_budget` raises it; a
        ``budget_exceeded`` event records budget and usage) or failed, as the budget says."""
        tracker = await self._fold_guards()
        error = tracker.check(self.store.now(), before, self.run_id)
        if error is None:
            return
        event = {
            "budget": error.budget.to_dict(),
            "usage": error.usage.to_dict(),
            "exceeded": error.exceeded,
            "before": before,
        }
        body = dumps(event, what=EXCEEDED_EVENT, run_id=self.run_id)
        self._heartbeat.check()
        await self.store.append_events(self._lease, [NewEvent(EXCEEDED_EVENT, body)])
        if error.budget.on_exceed == "fail":
            await self.fail(str(error.detail))
        else:
            await self.store.set_run_wait(self._lease, "message", BUDGET_TOPIC)
        raise error

    async def check_spin(self, rules: SpinRules) -> None:
        """Judge the run against ``rules``: on a finding, ``warn`` logs a ``spin_detected``
        event (once per finding until acknowledged), ``pause`` also parks the run (until
        :func:`zincir.acknowledge_spin`) and raises SpinDetected, ``fail`` fails it and
        raises."""
        if not isinstance(rules, SpinRules):
            raise InvalidInput(f"rules must be zincir.SpinRules, not {rules!r}", run_id=self.run_id)
        tracker = await self._fold_guards(eager=True)
        found = tracker.spin.finding(rules, self.run_id)
        if found is None:
            return
        if rules.action == "warn" and found.finding in tracker.spin.reported:
            return
        event = {
            "rule": found.rule,
            "finding": found.finding,
            "evidence": found.evidence,
            "action": rules.action,
        }
        body = dumps(event, what=SPIN_EVENT, run_id=self.run_id)
        self._heartbeat.check()
        await self.store.append_events(self._lease, [NewEvent(SPIN_EVENT, body)])
        tracker.spin.reported.add(found.finding)
        if rules.action == "warn":
            log.warning("%s", found)
            return
        if rules.action == "fail":
            await self.fail(str(found.detail))
        else:
            await self.store.set_run_wait(self._lease, "message", SPIN_TOPIC)
        raise found

    def seed_guards(
        self, events: Iterable[Event], created_at: str | datetime | None = None
    ) -> None:
        """Fold the whole log the caller has just read (a run being taken over) and, when it
        read the run's row too, the run's creation time: the first check reads neither."""
        if self._guards is None:
            self._guards = Guards()
        self._guards.fold(events)
        self._guards.read_at = time.monotonic()
        if created_at is not None:
            self._guards.start(created_at)

    async def _fold_guards(self, *, eager: bool = False) -> Guards:
        """The guards, brought up to date with the log: one read of the events after the
        last one folded, at each check while a budget is in force (or ``eager``), else at
        most once a second (a budget set from outside is picked up within that)."""
        tracker = self._guards
        if tracker is None:
            tracker = self._guards = Guards()
        if tracker.created_at is None:
            run = await self.store.get_run(self.run_id)
            if run is not None:
                tracker.start(run["created_at"])
        moment = time.monotonic()
        stale = moment - tracker.read_at >= _UNBUDGETED_READS  # never read: read_at is 0
        if eager or tracker.budget is not None or stale:
            tracker.read_at = moment
            tracker.fold(await self.store.list_events(self.run_id, after_seq=tracker.seq))
        return tracker

    async def complete(self, result: Any = None) -> None:
        """Mark the run completed (with an optional JSON result) and clear its lease."""
        result_json = (
            None
            if result is None
            else dumps(result, what="the run's result", run_id=self.run_id, convert=True)
        )
        await self._finish("completed", result_json=result_json)

    async def _complete_json(self, result_json: str) -> None:
        """:meth:`complete` with a result zincir already encoded as strict JSON (checked)."""
        await self._finish("completed", result_json=result_json)

    async def fail(self, error: str) -> None:
        """Mark the run failed with an error description and clear its lease."""
        await self._finish("failed", error=str(error))

    async def _finish(
        self, status: str, *, result_json: str | None = None, error: str | None = None
    ) -> None:
        if error is not None:  # a description, kept as valid UTF-8 whatever it holds
            error = printable(error)
        self._heartbeat.check()
        await self._releasing()
        await self.store.finish_run(self._lease, status, result_json=result_json, error=error)
        self._done = True
        self._unlist()
        forget(self._lease)
        await self._heartbeat.stop()

    def _unlist(self) -> None:
        if _OPEN.get(self.run_id) is self:
            del _OPEN[self.run_id]

    async def release(self) -> None:
        """Stop the heartbeat and give up the lease without changing the status."""
        if not self._done:
            await self._releasing()
        self._unlist()
        forget(self._lease)
        await self._heartbeat.stop()
        if self._done:
            return
        self._done = True
        await self.store.release_lease(self._lease)

    def before_release(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action`` whenever this context gives its lease up (release, close, complete,
        fail), while it still holds it."""
        self._before_release.append(action)

    async def _releasing(self) -> None:
        """What must happen while this context still holds the lease it is giving up."""
        for action in self._before_release:
            await action()

    async def close(self) -> None:
        """Same as :meth:`release`: stop heartbeating and free the lease."""
        await self.release()

    async def __aenter__(self) -> AgentContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- code versions ------------------------------------------------------------------

    async def patched(self, patch_id: str) -> bool:
        """True when the run reaches this point on code that has the change ``patch_id``
        (the first time, a ``patch_marker`` event records it); False on the replay of a run
        that passed this point without it (recorded work remains to replay and no marker).

        The same answer comes back on every replay, so branch on it: the old path for runs
        already past this point, the new one for the rest (``if await ctx.patched("fix")``).
        """
        run_id = self.run_id
        check_id(patch_id, "a patch id", run_id=run_id)

        async def mark() -> None:
            body = dumps({"id": patch_id}, what="a patch marker", run_id=run_id)
            self._heartbeat.check()
            await self.store.append_events(self._lease, [NewEvent(PATCH_MARKER, body)])

        return await self.replay.patched(patch_id, mark)

    async def unreplayed(self) -> list[str]:
        """Recorded steps and operations this context has not replayed (yet), in log order:
        work that the code now running skipped, e.g. ``["step 'notify'"]``."""
        await self.replay.load()
        return self.replay.unreplayed()

    # -- reads --------------------------------------------------------------------------

    async def state(self) -> DurableState:
        """The latest accepted checkpoint plus only the events after its acceptance."""
        stored = await self.store.load_state(self.run_id)
        record = stored.checkpoint
        checkpoint = None
        if record is not None:
            assert record.decided_seq is not None and record.decided_at is not None
            checkpoint = Checkpoint(
                record.id,
                record.round,
                CheckpointCandidate.from_json(record.candidate),
                record.evidence,
                record.lineage_seq,
                record.decided_seq,
                record.decided_at,
            )
        return DurableState(
            stored.run_id, stored.status, stored.config, checkpoint, stored.events, stored.last_seq
        )

    async def pending_tools(self) -> list[ToolCall]:
        """Tool intents without a result, in the order they were recorded."""
        return [
            ToolCall(data["id"], data["name"], data["arguments"])
            for data in await self.store.open_intents(self.run_id)
        ]

    async def pending_checkpoint(self) -> PendingCheckpoint | None:
        """The candidate a crash left unverified, or None."""
        record = await self.store.proposed_checkpoint(self.run_id)
        if record is None:
            return None
        return PendingCheckpoint(
            record.id,
            record.round,
            CheckpointCandidate.from_json(record.candidate),
            record.lineage_seq,
        )


def _same_database(one: Store, other: Store) -> bool:
    """The same store, or two stores opened on the same database."""
    if one is other:
        return True
    path = getattr(one, "path", None)
    same_kind = type(one) is type(other)
    return same_kind and isinstance(path, str) and path == getattr(other, "path", None)


def _check_verifier(verify: object, run_id: str) -> None:
    """A verifier must be callable; checked before the candidate is stored."""
    if not callable(verify):
        raise InvalidInput(
            f"verify must be a callable (candidate) -> Verification, not {verify!r}",
            run_id=run_id,
        )
