"""One OpenAI Agents SDK run as a zincir run: created on the first call, taken over after a
crash (at once when its owner died on this machine), its lease held while the SDK runs; the
run's progress (model call numbers, each tool call's sequence) lives here.

A model call is numbered in the order the SDK makes them (0, 1, 2, …): the SDK makes them
one at a time, so a replay numbers them alike; a failed call keeps its number for its retry.
A tool call is known by the model's call id; its sequence is ``model call * 1000 +
position`` (its index among the calls of that response), fixed when the response arrives,
whatever order the calls then run in.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from ..._errors import InvalidInput, OperationFailed, RunExists, RunTerminal
from ...agent._identity import ATTEMPT_STRIDE, attempt_sequence, tool_sequence
from ...contract import Failure, Invocation, OperationKind, Record, Success
from ...durable import HandlerRegistry, LocalRuntime, RetryPolicy
from ...runs import AgentContext
from ...store import TERMINAL_STATUSES, LogEntry, OperationKey, Store
from ...store._run_rules import terminal_error
from .._unit import OperationBody
from ._codec import canonical

__all__ = ["HANDLER", "PROVIDER", "RunScope", "open_run"]

PROVIDER: Final = "openai-agents"
HANDLER: Final = "openai-agents"
_UNPLANNED: Final = 1 << 50
"""Sequences of tool calls no model response of this run names (numbered as they start)."""
_KINDS: Final = (
    OperationKind.MODEL_REQUEST,
    OperationKind.MODEL_STREAM,
    OperationKind.TOOL_CALL,
    OperationKind.MCP_REQUEST,
    OperationKind.APPROVAL_RESUME,
)
_ONCE: Final = RetryPolicy(max_attempts=1)
"""The SDK retries models and reports tool errors itself: zincir runs each unit once."""


@dataclass(eq=False)
class RunScope:
    """One executing run: its lease (None while replaying a completed run: nothing may run
    then), the runtime executing its units, and its progress."""

    run_id: str
    store: Store
    ctx: AgentContext | None
    models: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    unplanned: int = 0
    logged_responses: int = 0
    logged_results: set[str] = field(default_factory=set)
    calls_done: set[str] = field(default_factory=set)
    intents: set[str] = field(default_factory=set)
    """Call ids the run's log holds a tool intent of (a result may be logged for them)."""
    executed: int = 0
    """Units this process ran (not replayed)."""
    bodies: dict[str, OperationBody] = field(default_factory=dict)
    """The units running through the runtime's registered handler, by stable key."""
    runtime: LocalRuntime = field(init=False)
    """Executes the run's units: on this store, each once (the SDK retries on its own)."""

    def __post_init__(self) -> None:
        registry = HandlerRegistry()
        for kind in _KINDS:
            registry.register(kind, HANDLER, self._dispatch)
        self.runtime = LocalRuntime(self.store, registry, _ONCE)

    async def _dispatch(self, invocation: Invocation, request: Any) -> Any:
        unit = self.bodies.get(invocation.stable_key())
        if unit is None:
            raise OperationFailed(
                "NoUnitBody",
                True,
                f"no OpenAI Agents SDK call waits for {invocation.stable_key()} in this process",
                run_id=invocation.run_id,
            )
        return await unit(invocation, request)

    def next_model(self) -> int:
        """The number of the model call about to be made. It moves on only once a call
        succeeds: the SDK's retry of a failed call (or a re-run's) is the same call, its
        next attempt, so the numbering does not depend on how often a provider failed."""
        return self.models

    def model_done(self, number: int) -> None:
        self.models = max(self.models, number + 1)

    def plan_calls(self, number: int, call_ids: list[str]) -> None:
        """Give the calls of model call ``number``'s response their sequences."""
        for position, call_id in enumerate(call_ids):
            self.calls.setdefault(call_id, tool_sequence(number, position, run_id=self.run_id))

    def call_sequence(self, call_id: str | None) -> int:
        if call_id is not None and call_id in self.calls:
            return self.calls[call_id]
        sequence = _UNPLANNED + self.unplanned
        self.unplanned += 1
        return sequence

    async def execute(
        self,
        step: str,
        sequence: int,
        kind: OperationKind,
        document: dict[str, Any],
        body: Callable[[], Awaitable[Any]],
        log: Callable[[Any], LogEntry | None] | None = None,
    ) -> tuple[Any, bool, bool]:
        """The output of unit ``step``/``sequence``: its record's, or ``body()``'s, run once and
        recorded; whether it ran here; and whether ``log(output)``'s entry was appended to the
        run's log in the record's own transaction (else the caller logs it, if it must). A
        failure recorded by an earlier process that may pass now is tried again as the next
        attempt of the identity."""
        input_json = canonical(document)
        attempt = 0
        while True:
            invocation = Invocation(
                run_id=self.run_id,
                step_id=step,
                sequence=attempt_sequence(sequence, attempt, run_id=self.run_id),
                kind=kind,
                handler_id=HANDLER,
                input_json=input_json,
            )
            if self.ctx is None:
                await self._check_recorded(invocation)
            unit = OperationBody(body, _retryable)
            record, logged = await self._run(invocation, unit, log)
            outcome = record.outcome
            if unit.ran:
                self.executed += 1
            if isinstance(outcome, Success):
                return json.loads(outcome.output_json)["value"], unit.ran, logged
            assert isinstance(outcome, Failure)
            if unit.raised is not None:
                raise unit.raised
            if outcome.retryable and attempt + 1 < ATTEMPT_STRIDE:
                attempt += 1
                continue
            raise OperationFailed(
                outcome.error, outcome.retryable, outcome.message, run_id=self.run_id
            )

    async def _run(
        self,
        invocation: Invocation,
        unit: OperationBody,
        log: Callable[[Any], LogEntry | None] | None,
    ) -> tuple[Record, bool]:
        if log is None or self.ctx is None:
            return await self.runtime.execute(invocation, inline=unit), False

        def entries(record: Record) -> list[LogEntry]:
            outcome = record.outcome
            if not isinstance(outcome, Success):
                return []
            entry = log(json.loads(outcome.output_json)["value"])
            return [] if entry is None else [entry]

        key = invocation.stable_key()
        self.bodies[key] = unit  # the runtime's registered handler runs it
        try:
            return await self.runtime.execute_and_log(invocation, entries)
        finally:
            self.bodies.pop(key, None)

    async def _check_recorded(self, invocation: Invocation) -> None:
        key = OperationKey(invocation.run_id, invocation.step_id, invocation.sequence)
        row = await self.store.get_operation(key)
        if row is None or row.status != "completed":
            raise RunTerminal(
                f"the run is completed, yet replaying it reached {invocation.stable_key()}, "
                "which it never ran; the agent, its tools or the input changed since. Run it "
                "under a new run id",
                run_id=self.run_id,
            )


def _retryable(error: BaseException) -> bool:
    """The SDK's own errors (a behaviour error, a refused input) repeat; others may pass."""
    from agents.exceptions import AgentsException

    return not isinstance(error, AgentsException)


async def open_run(
    store: Store,
    run_id: str,
    *,
    name: str,
    config: dict[str, Any],
    lease_ttl: timedelta,
    app_version: str | None,
    budget: Any = None,
) -> RunScope:
    """Create the run or take it over (LeaseHeld while a live process owns it); a completed
    run is opened for replay only; a failed or cancelled one is refused. InputDrift when the
    stored input differs from ``config``'s."""
    row = await store.get_run(run_id)
    if row is not None:
        _check_input(run_id, row["config"], config)
    if row is not None and row["status"] == "completed":
        return await _scoped(RunScope(run_id, store, None))
    if row is not None and row["status"] in TERMINAL_STATUSES:
        raise terminal_error(run_id, row["status"], "; start a new run id to try again")
    ctx: AgentContext | None = None
    if row is None:
        try:
            ctx = await AgentContext.create(
                store,
                name=name,
                provider=PROVIDER,
                config=config,
                lease_ttl=lease_ttl,
                run_id=run_id,
                app_version=app_version,
                budget=budget,
            )
        except RunExists:
            ctx = None
    if ctx is None:
        ctx = await AgentContext.recover(store, run_id, lease_ttl=lease_ttl, budget=budget)
    return await _scoped(RunScope(run_id, store, ctx))


async def adopt(ctx: AgentContext) -> RunScope:
    """A scope on a run another component already holds (a ResumeWorker, check-compat)."""
    return await _scoped(RunScope(ctx.run_id, ctx.store, ctx))


async def _scoped(scope: RunScope) -> RunScope:
    """``scope`` knowing what the run's log already shows (responses, tool results)."""
    for event in await scope.store.list_events(scope.run_id):
        if event.type == "llm_call":
            scope.logged_responses += 1
        elif event.type == "tool_call" and isinstance(event.payload, dict):
            scope.intents.add(str(event.payload.get("id")))
        elif event.type == "tool_result" and isinstance(event.payload, dict):
            scope.logged_results.add(str(event.payload.get("id")))
    return scope


def _check_input(run_id: str, stored: Any, config: dict[str, Any]) -> None:
    from ..._errors import InputDrift

    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            stored = None
    if not isinstance(stored, dict) or stored.get("integration") != PROVIDER:
        raise InvalidInput(
            "this run id belongs to a run that is not an OpenAI Agents SDK run; "
            "choose another run id",
            run_id=run_id,
        )
    before, now = stored.get("input_sha256"), config.get("input_sha256")
    if before != now:
        raise InputDrift(
            f"the run was started with another input (sha256 {_short(before)}…, now "
            f"{_short(now)}…); re-run it with its original input, or start a new run id",
            run_id=run_id,
        )


def _short(digest: object) -> str:
    return str(digest).removeprefix("sha256:")[:12]
