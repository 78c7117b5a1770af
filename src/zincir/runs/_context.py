"""AgentContext: the bring-your-own-loop API over one run's lease and event log."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import apsw

from .._errors import (
    CheckpointError,
    DuplicateToolCall,
    InvalidInput,
    RunExists,
    UnknownToolCall,
)
from .._json import dumps, loads_strict
from .._time import from_db, to_db
from ..store import Event, SQLiteStore, one, scalar
from ._lease import (
    Heartbeat,
    Lease,
    NewEvent,
    acquire,
    check_run_id,
    fenced_append,
    new_owner_id,
    release,
    validate_ttl,
)
from ._types import (
    Checkpoint,
    CheckpointCandidate,
    CheckpointOutcome,
    DurableState,
    PendingCheckpoint,
    ToolCall,
    Verification,
)

__all__ = ["AgentContext", "Verifier"]

Verifier = Callable[[CheckpointCandidate], Awaitable[Verification]]
DEFAULT_LEASE_TTL = timedelta(seconds=30)


def transition(old: str, new: str) -> NewEvent:
    """The ``state_transition`` event that accompanies a status change."""
    return ("state_transition", dumps({"from": old, "to": new}), None)


class AgentContext:
    """Owns a run's lease while the application owns the loop.

    Every write re-checks the fencing token in its transaction and renews the lease; a
    background heartbeat renews it between writes.
    """

    def __init__(self, store: SQLiteStore, lease: Lease) -> None:
        self.store = store
        self._lease = lease
        self._heartbeat = Heartbeat(store, lease)
        self._done = False

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
        store: SQLiteStore,
        name: str,
        provider: str = "",
        config: Any = None,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        run_id: str | None = None,
        *,
        parent_id: str | None = None,
    ) -> AgentContext:
        """Create a run (status ``running``) and take its lease."""
        ttl = validate_ttl(lease_ttl, run_id=run_id)
        run_id = check_run_id(run_id) if run_id is not None else str(uuid.uuid4())
        if not isinstance(name, str) or not name:
            raise InvalidInput("a run needs a non-empty name", run_id=run_id)
        if not isinstance(provider, str):
            raise InvalidInput("provider must be a string label", run_id=run_id)
        config_json = dumps({} if config is None else config, what="config", run_id=run_id)
        lease = Lease(run_id, new_owner_id(), 1, ttl)
        started = transition("pending", "running")

        def insert(conn: apsw.Connection) -> None:
            now = store.clock()
            stamp = to_db(now)
            try:
                conn.execute(
                    "INSERT INTO agent_runs (id, parent_id, name, status, provider, config, "
                    "lease_owner, lease_token, lease_expires_at, created_at, updated_at) "
                    "VALUES (?, ?, ?, 'running', ?, ?, ?, 1, ?, ?, ?)",
                    (run_id, parent_id, name, provider, config_json, lease.owner,
                     lease.expiry(now), stamp, stamp),
                )
            except apsw.ConstraintError:
                raise RunExists(
                    "a run with this id already exists; use AgentContext.recover",
                    run_id=run_id,
                ) from None
            fenced_append(conn, lease, now, [started])

        await store.write(insert)
        return cls._started(store, lease)

    @classmethod
    async def recover(
        cls, store: SQLiteStore, run_id: str, *, lease_ttl: timedelta | float = DEFAULT_LEASE_TTL
    ) -> AgentContext:
        """Take over a run whose lease is absent or expired (raises LeaseHeld otherwise)."""
        return await cls._acquire(store, run_id, lease_ttl, force=False)

    @classmethod
    async def force_recover(
        cls, store: SQLiteStore, run_id: str, *, lease_ttl: timedelta | float = DEFAULT_LEASE_TTL
    ) -> AgentContext:
        """Take over a run even from a live owner, fencing it; only once it is known dead."""
        return await cls._acquire(store, run_id, lease_ttl, force=True)

    @classmethod
    async def _acquire(
        cls, store: SQLiteStore, run_id: str, lease_ttl: timedelta | float, *, force: bool
    ) -> AgentContext:
        ttl = validate_ttl(lease_ttl, run_id=run_id)
        check_run_id(run_id)
        owner = new_owner_id()

        def take(conn: apsw.Connection) -> Lease:
            now = store.clock()
            token, status = acquire(conn, run_id, owner, ttl, now, force=force)
            lease = Lease(run_id, owner, token, ttl)
            if status == "pending":
                conn.execute("UPDATE agent_runs SET status = 'running' WHERE id = ?", (run_id,))
                fenced_append(conn, lease, now, [transition("pending", "running")])
            return lease

        return cls._started(store, await store.write(take))

    @classmethod
    def _started(cls, store: SQLiteStore, lease: Lease) -> AgentContext:
        ctx = cls(store, lease)
        ctx._heartbeat.start()
        return ctx

    @classmethod
    def adopt(cls, store: SQLiteStore, lease: Lease) -> AgentContext:
        """Wrap a lease acquired elsewhere (a ResumeWorker claim) and start its heartbeat."""
        return cls._started(store, lease)

    # -- writes -------------------------------------------------------------------------

    async def _append(
        self,
        events: list[NewEvent],
        extra: Callable[[apsw.Connection], None] | None = None,
        *,
        after: Callable[[apsw.Connection, int], None] | None = None,
    ) -> int:
        """Append ``events`` fenced; ``extra`` runs before and ``after(conn, last_seq)`` after,
        in the same transaction."""
        self._heartbeat.check()
        lease, clock = self._lease, self.store.clock

        def write(conn: apsw.Connection) -> int:
            now = clock()
            if extra is not None:
                extra(conn)
            last_seq = fenced_append(conn, lease, now, events)
            if after is not None:
                after(conn, last_seq)
            return last_seq

        return await self.store.write(write)

    async def record_response(
        self,
        content: Any,
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] = (),
        stop_reason: str | None = None,
        *,
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> int:
        """Record a model response and every tool intent it asks for, in one transaction.

        Returns the ``llm_call`` event's seq. A repeated tool call id raises DuplicateToolCall
        and stores nothing.
        """
        run_id = self.run_id
        calls = [ToolCall.coerce(call, run_id=run_id) for call in tool_calls]
        seen: set[str] = set()
        for call in calls:
            if call.id in seen:
                raise DuplicateToolCall(
                    f"tool call id {call.id!r} appears twice in one response", run_id=run_id
                )
            seen.add(call.id)
        payload: dict[str, Any] = {
            "content": content,
            "tool_calls": [call.to_json() for call in calls],
            "stop_reason": stop_reason,
        }
        if usage is not None:
            payload["usage"] = dict(usage)
        if model is not None:
            payload["model"] = model
        events: list[NewEvent] = [("llm_call", dumps(payload, what="response", run_id=run_id),
                                   None)]
        events += [
            ("tool_call", dumps(call.to_json(), what="tool arguments", run_id=run_id), call.id)
            for call in calls
        ]
        ids = [call.id for call in calls]

        def open_intents(conn: apsw.Connection, last_seq: int) -> None:
            first = last_seq - len(ids) + 1
            conn.executemany(
                "INSERT INTO open_intents (run_id, tool_call_id, seq) VALUES (?, ?, ?)",
                [(run_id, call_id, first + i) for i, call_id in enumerate(ids)],
            )

        try:
            last = await self._append(events, after=open_intents if ids else None)
        except apsw.ConstraintError:
            raise DuplicateToolCall(
                "a tool call id in this response already has an intent in the run; "
                "nothing was stored",
                run_id=run_id,
            ) from None
        return last - len(calls)

    async def record_tool_result(self, call_id: str, result: Any, *, is_error: bool = False) -> int:
        """Record the result of a pending tool intent; returns the event's seq."""
        run_id = self.run_id
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput("call_id must be a non-empty string", run_id=run_id)
        body = dumps(
            {"id": call_id, "result": result, "is_error": bool(is_error)},
            what="tool result", run_id=run_id,
        )

        def check_intent(conn: apsw.Connection) -> None:
            intent = conn.execute(
                "SELECT 1 FROM events WHERE run_id = ? AND type = 'tool_call' "
                "AND tool_call_id = ?",
                (run_id, call_id),
            ).fetchone()
            if intent is None:
                raise UnknownToolCall(
                    f"no tool intent {call_id!r}; record_response must record it first",
                    run_id=run_id,
                )

        def close_intent(conn: apsw.Connection, last_seq: int) -> None:
            conn.execute(
                "DELETE FROM open_intents WHERE run_id = ? AND tool_call_id = ?",
                (run_id, call_id),
            )

        try:
            return await self._append(
                [("tool_result", body, call_id)], check_intent, after=close_intent
            )
        except apsw.ConstraintError:
            raise DuplicateToolCall(
                f"tool call {call_id!r} already has a result", run_id=run_id
            ) from None

    async def checkpoint(
        self, candidate: CheckpointCandidate | Mapping[str, Any], verify: Verifier
    ) -> CheckpointOutcome:
        """Persist ``candidate``, run ``verify`` on it, then persist the decision.

        If a candidate equal to this one is pending from an interrupted attempt, it is
        verified instead of proposing a new round.
        """
        run_id = self.run_id
        proposal = CheckpointCandidate.coerce(candidate, run_id=run_id)
        state_json = dumps(proposal.to_json(), what="checkpoint candidate", run_id=run_id)
        pending = await self.pending_checkpoint()
        if pending is not None:
            if dumps(pending.candidate.to_json()) != state_json:
                raise CheckpointError(
                    f"checkpoint {pending.checkpoint_id} (round {pending.round}) is still "
                    "pending verification; verify it with resume_checkpoint() first",
                    run_id=run_id,
                )
            return await self._decide(pending, verify)
        return await self._decide(await self._propose(state_json, proposal), verify)

    async def resume_checkpoint(self, verify: Verifier) -> CheckpointOutcome | None:
        """Verify the candidate a crash left pending; None if there is none."""
        pending = await self.pending_checkpoint()
        return None if pending is None else await self._decide(pending, verify)

    async def _propose(self, state_json: str, proposal: CheckpointCandidate) -> PendingCheckpoint:
        self._heartbeat.check()
        lease, clock, run_id = self._lease, self.store.clock, self.run_id

        def write(conn: apsw.Connection) -> PendingCheckpoint:
            now = clock()
            lineage = fenced_append(conn, lease, now)
            round_no = scalar(
                conn, "SELECT COALESCE(MAX(round), 0) + 1 FROM checkpoints WHERE run_id = ?",
                (run_id,),
            )
            checkpoint_id = scalar(
                conn,
                "INSERT INTO checkpoints (run_id, round, status, state, lineage_seq, "
                "proposed_seq, created_at) VALUES (?, ?, 'proposed', ?, ?, ?, ?) RETURNING id",
                (run_id, round_no, state_json, lineage, lineage + 1, to_db(now)),
            )
            event = dumps({"checkpoint_id": checkpoint_id, "round": round_no,
                           "lineage_seq": lineage, "candidate": proposal.to_json()})
            fenced_append(conn, lease, now, [("checkpoint_proposed", event, None)])
            return PendingCheckpoint(checkpoint_id, round_no, proposal, lineage)

        return await self.store.write(write)

    async def _decide(self, pending: PendingCheckpoint, verify: Verifier) -> CheckpointOutcome:
        run_id = self.run_id
        verdict = await verify(pending.candidate)
        if not isinstance(verdict, Verification):
            raise InvalidInput(
                f"verify must return Verification(passed, evidence), not {verdict!r}",
                run_id=run_id,
            )
        accepted = bool(verdict.passed)
        status = "accepted" if accepted else "rejected"
        evidence_json = dumps(verdict.evidence, what="verifier evidence", run_id=run_id)
        event = dumps({"checkpoint_id": pending.checkpoint_id, "round": pending.round,
                       "lineage_seq": pending.lineage_seq,
                       "evidence": verdict.evidence})
        self._heartbeat.check()
        lease, clock = self._lease, self.store.clock

        def write(conn: apsw.Connection) -> None:
            now = clock()
            seq = fenced_append(conn, lease, now, [(f"checkpoint_{status}", event, None)])
            decided = conn.execute(
                "UPDATE checkpoints SET status = ?, evidence = ?, decided_seq = ?, "
                "decided_at = ? WHERE id = ? AND status = 'proposed' RETURNING 1",
                (status, evidence_json, seq, to_db(now), pending.checkpoint_id),
            ).fetchone()
            if decided is None:
                raise CheckpointError(
                    f"checkpoint {pending.checkpoint_id} already has a verifier decision",
                    run_id=run_id,
                )

        await self.store.write(write)
        return CheckpointOutcome(accepted, pending.checkpoint_id, pending.round, verdict.evidence)

    async def complete(self, result: Any = None) -> None:
        """Mark the run completed (with an optional JSON result) and clear its lease."""
        await self._finish("completed", result=result)

    async def fail(self, error: str) -> None:
        """Mark the run failed with an error description and clear its lease."""
        await self._finish("failed", error=str(error))

    async def _finish(self, status: str, *, result: Any = None, error: str | None = None) -> None:
        run_id = self.run_id
        result_json = None if result is None else dumps(result, what="result", run_id=run_id)
        self._heartbeat.check()
        lease, clock = self._lease, self.store.clock

        def write(conn: apsw.Connection) -> None:
            now = clock()
            fenced_append(conn, lease, now, [transition("running", status)])
            conn.execute(
                "UPDATE agent_runs SET status = ?, result = ?, last_error = ?, lease_owner = NULL, "
                "lease_expires_at = NULL WHERE id = ?",
                (status, result_json, error, run_id),
            )

        await self.store.write(write)
        self._done = True
        await self._heartbeat.stop()

    async def release(self) -> None:
        """Stop the heartbeat and give up the lease without changing the status."""
        await self._heartbeat.stop()
        if self._done:
            return
        self._done = True
        lease, clock = self._lease, self.store.clock
        await self.store.write(lambda conn: release(conn, lease, clock()))

    async def close(self) -> None:
        """Same as :meth:`release`: stop heartbeating and free the lease."""
        await self.release()

    async def __aenter__(self) -> AgentContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reads --------------------------------------------------------------------------

    async def state(self) -> DurableState:
        """The latest accepted checkpoint plus only the events after its acceptance."""
        run_id = self.run_id

        def read(conn: apsw.Connection) -> DurableState:
            status, config, last_seq = one(
                conn, "SELECT status, config, last_seq FROM agent_runs WHERE id = ?", (run_id,)
            )
            row = conn.execute(
                "SELECT id, round, state, evidence, lineage_seq, decided_seq, decided_at "
                "FROM checkpoints WHERE run_id = ? AND status = 'accepted' "
                "ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            checkpoint = None
            after = 0
            if row is not None:
                cid, round_no, state, evidence, lineage, decided_seq, decided_at = row
                checkpoint = Checkpoint(
                    cid, round_no, CheckpointCandidate.from_json(loads_strict(state)),
                    None if evidence is None else loads_strict(evidence),
                    lineage, decided_seq, from_db(decided_at),
                )
                after = decided_seq
            events = [
                Event(run_id, seq, kind, loads_strict(payload), from_db(created))
                for seq, kind, payload, created in conn.execute(
                    "SELECT seq, type, payload, created_at FROM events "
                    "WHERE run_id = ? AND seq > ? ORDER BY seq",
                    (run_id, after),
                )
            ]
            return DurableState(run_id, status, loads_strict(config), checkpoint, events,
                                last_seq)

        return await self.store.read(read)

    async def pending_tools(self) -> list[ToolCall]:
        """Tool intents without a result, in the order they were recorded."""
        run_id = self.run_id

        def read(conn: apsw.Connection) -> list[ToolCall]:
            rows = conn.execute(
                "SELECT intent.payload FROM open_intents AS open JOIN events AS intent "
                "ON intent.run_id = open.run_id AND intent.seq = open.seq "
                "WHERE open.run_id = ? ORDER BY open.seq",
                (run_id,),
            )
            calls = []
            for (payload,) in rows:
                data = loads_strict(payload)
                calls.append(ToolCall(data["id"], data["name"], data["arguments"]))
            return calls

        return await self.store.read(read)

    async def pending_checkpoint(self) -> PendingCheckpoint | None:
        """The candidate a crash left unverified, or None."""
        run_id = self.run_id

        def read(conn: apsw.Connection) -> PendingCheckpoint | None:
            row = conn.execute(
                "SELECT id, round, state, lineage_seq FROM checkpoints "
                "WHERE run_id = ? AND status = 'proposed' ORDER BY round DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            if row is None:
                return None
            cid, round_no, state, lineage = row
            return PendingCheckpoint(
                cid, round_no, CheckpointCandidate.from_json(loads_strict(state)), lineage
            )

        return await self.store.read(read)
