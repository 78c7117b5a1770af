"""The operation backend: each pydantic-ai durable unit is one zincir invocation executed by the
capability's DurableRuntime, so a replay returns its record instead of running the body.

Outcomes: a Success holds ``{"value": payload}``; a tool unit that asked for approval or was
deferred is Suspended (its payload is the state, so every replay raises the same signal);
a retryable Failure (after the runtime's own attempts) is followed by a durable
``retry.delay`` and the body again under the next sequence; a non-retryable one raises.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from pydantic_ai.durable_exec import (
    BoundDurableOperation,
    DurableOperation,
    DurableOperationId,
    DynamicToolsetCallToolParams,
    EventStreamHandlerParams,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    ToolsetCallToolParams,
    record_durable_unit,
)
from pydantic_ai.exceptions import (
    ModelHTTPError,
    ModelRequestRejectedError,
    RunCancelled,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UserError,
)

from ..._errors import OperationFailed, RunTerminal, Suspend
from ...contract import Failure, Invocation, OperationKind, Record, Success, Suspended
from ...durable import LocalRuntime
from ...store import OperationKey, grouped_writes
from .._unit import OperationBody
from ._identity import canonical, classify, event_call_id, handler_id, project, step_id
from ._run import CURRENT_CALL, CURRENT_RUN, ROUND_SHIFT, RunScope
from ._stream import CURRENT_UNIT

if TYPE_CHECKING:
    from ._capability import ZincirDurability

__all__ = ["SUSPENDS", "UnitBodies", "ZincirBackend", "is_retryable"]

P = TypeVar("P")
W = TypeVar("W")
R = TypeVar("R")

SUSPENDS: Final = {"approval_required": "approval", "call_deferred": "external_tool"}
_TRANSIENT_STATUS: Final = frozenset({408, 409, 425, 429})
_PARAMS: ContextVar[object] = ContextVar("zincir_pydantic_ai_params", default=None)
_CALL_STEPS: Final = frozenset({"tool.call", "mcp.request"})

UnitBody = Callable[[Invocation, Any], Awaitable[Any]]


class UnitBodies:
    """Unit bodies by stable key, for a runtime that calls registered handlers (served in
    this process with ``serve``) instead of an inline callable."""

    def __init__(self) -> None:
        self.by_key: dict[str, UnitBody] = {}

    async def __call__(self, invocation: Invocation, request: Any) -> Any:
        body = self.by_key.get(invocation.stable_key())
        if body is None:
            raise OperationFailed(
                "NoUnitBody",
                True,
                f"no pydantic-ai unit body waits for {invocation.stable_key()} in this process",
                run_id=invocation.run_id,
            )
        return await body(invocation, request)


BODIES: Final = UnitBodies()


def is_retryable(error: BaseException) -> bool:
    """Transient by default (a provider outage, a dropped connection, a RuntimeError);
    refusals, bad requests and usage errors are not worth another attempt."""
    if isinstance(error, OperationFailed):
        return bool(error.retryable)
    if isinstance(error, ModelHTTPError):
        return error.status_code in _TRANSIENT_STATUS or error.status_code >= 500
    return not isinstance(
        error,
        UserError
        | ModelRequestRejectedError
        | UsageLimitExceeded
        | RunCancelled
        | UnexpectedModelBehavior,
    )


class _Capturing(BoundDurableOperation[P, W, R], Generic[P, W, R]):
    """Exposes each call's typed params to ``execute`` (the cache key's layout is private)."""

    def __init__(self, inner: BoundDurableOperation[P, W, R]) -> None:
        self._inner = inner

    @property
    def operation(self) -> DurableOperation[P, W, R]:
        return self._inner.operation

    async def __call__(self, params: P, *, config: object | None = None) -> R:
        token = _PARAMS.set(params)
        try:
            return await self._inner(params, config=config)
        finally:
            _PARAMS.reset(token)


class ZincirBackend(JournalCallableOperationBackend[str]):
    """Runs every unit through the capability's runtime; the config is the operation's role."""

    def __init__(self, durability: ZincirDurability[Any]) -> None:
        super().__init__(
            agent_name=durability.name,
            default_model_id=durability.default_model_id,
            config=RoleBasedOperationConfig(
                model="model", event="event", capability="capability", tool="tool"
            ),
        )
        self._durability = durability

    def bind(self, operation: DurableOperation[P, W, R]) -> BoundDurableOperation[P, W, R]:
        return _Capturing(super().bind(operation))

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: str,
    ) -> object:
        scope = CURRENT_RUN.get()
        if scope is None or scope.agent != self._durability.name:
            raise UserError(
                f"a durable operation of agent {self._durability.name!r} ran outside its run; "
                "ZincirDurability journals only inside agent.run(run_id=...)"
            )
        kind, step = classify(operation_id, config)
        step_name = step_id(scope.agent, step)
        params = _PARAMS.get()
        input_json = canonical(project(name, operation_id, params))
        position = _call_position(scope, step, params)
        policy = self._durability.retry
        attempt = 1
        retry_round = 0
        while True:
            if position is None:
                sequence = scope.claim(step_name)
            elif kind is OperationKind.EVENT_DELIVERY:
                sequence = scope.within(position, step_name)  # a call's events, in its order
            else:
                sequence = position | retry_round << ROUND_SHIFT
            invocation = Invocation(
                run_id=scope.run_id,
                step_id=step_name,
                sequence=sequence,
                kind=kind,
                handler_id=handler_id(scope.agent),
                input_json=input_json,
            )
            unit = _Unit(body)
            call = position is not None and kind is not OperationKind.EVENT_DELIVERY
            record = await self.run_unit(scope, invocation, unit, call=call)
            record_durable_unit(executed=unit.ran)
            outcome = record.outcome
            if isinstance(outcome, Success):
                return json.loads(outcome.output_json)["value"]
            if isinstance(outcome, Suspended):
                return json.loads(outcome.state_json)
            assert isinstance(outcome, Failure)
            # A failure replayed from an earlier process spends none of this one's attempts:
            # a run that outlived an outage must not freeze on its recorded failures.
            if outcome.retryable and (not unit.ran or attempt < policy.max_attempts):
                delay = policy.delay(retry_round + 1)
                await self.retry_delay(scope, invocation, delay, call=call)
                attempt += 1 if unit.ran else 0
                retry_round += 1
                continue
            error = unit.raised if unit.raised is not None else _failed(outcome, scope.run_id)
            if not outcome.retryable:
                scope.terminal.append(error)
            raise error

    async def run_unit(
        self, scope: RunScope, invocation: Invocation, unit: UnitBody, *, call: bool = False
    ) -> Record:
        """The record of ``invocation``: stored, or made by running ``unit`` once. A
        ``call`` unit (a tool call run beside its siblings) shares its writes' commits with
        theirs, and the units its body starts are numbered within it."""
        token = CURRENT_UNIT.set((invocation.step_id, invocation.sequence))
        call_token = CURRENT_CALL.set(invocation.sequence if call else None)
        try:
            if not call:
                return await self._run_unit(scope, invocation, unit)
            with grouped_writes():
                return await self._run_unit(scope, invocation, unit)
        finally:
            CURRENT_CALL.reset(call_token)
            CURRENT_UNIT.reset(token)

    async def _run_unit(self, scope: RunScope, invocation: Invocation, unit: UnitBody) -> Record:
        runtime = self._durability.runtime
        if scope.ctx is None:
            row = await self._durability.store.get_operation(
                OperationKey(invocation.run_id, invocation.step_id, invocation.sequence)
            )
            if row is None or row.status != "completed":
                raise RunTerminal(
                    f"the run is completed, yet replaying it reached {invocation.stable_key()}, "
                    "which it never ran; the agent's code or input changed",
                    run_id=scope.run_id,
                )
        if isinstance(runtime, LocalRuntime):
            return await runtime.execute(invocation, inline=unit)
        key = invocation.stable_key()
        BODIES.by_key[key] = unit
        try:
            return await runtime.execute(invocation)
        finally:
            BODIES.by_key.pop(key, None)

    async def retry_delay(
        self, scope: RunScope, failed: Invocation, delay: timedelta, *, call: bool = False
    ) -> None:
        """Wait ``delay`` as a ``retry_delay`` operation: a replay skips a wait already done.
        A tool call's wait is numbered by the failed unit (its siblings fail in any order)."""
        step_name = step_id(scope.agent, "retry.delay")
        milliseconds = int(delay.total_seconds() * 1000)
        invocation = Invocation(
            run_id=scope.run_id,
            step_id=step_name,
            sequence=scope.within(failed.sequence, step_name) if call else scope.claim(step_name),
            kind=OperationKind.RETRY_DELAY,
            handler_id=handler_id(scope.agent),
            input_json=canonical({"failed": failed.stable_key(), "delay_ms": milliseconds}),
        )

        async def wait(invocation: Invocation, request: Any) -> Any:
            await asyncio.sleep(milliseconds / 1000)
            return {"slept_ms": milliseconds}

        await self.run_unit(scope, invocation, wait)


def _call_position(scope: RunScope, step: str, params: object) -> int | None:
    """The position of the tool call a ``tool.call`` or ``mcp.request`` unit runs, or of the
    call a ``event.delivery`` unit reports on; None for any other unit."""
    if step in _CALL_STEPS and isinstance(
        params, ToolsetCallToolParams | DynamicToolsetCallToolParams
    ):
        call_id, messages = params.ctx.tool_call_id, params.ctx.messages
    elif step == "event.delivery" and isinstance(params, EventStreamHandlerParams):
        call_id, messages = event_call_id(params.event), params.run_context.messages
    else:
        return None
    return scope.call_position(call_id, messages, step_id(scope.agent, "tool.call"))


class _Unit(OperationBody):
    """A unit body whose payload may ask to suspend (an approval, a timer): raised as
    ``Suspend`` instead of recorded as a value."""

    def __init__(self, body: Callable[[], Awaitable[object]]) -> None:
        super().__init__(body, is_retryable)

    def recorded(self, payload: Any) -> Any:
        if isinstance(payload, dict) and payload.get("kind") in SUSPENDS:
            raise Suspend(SUSPENDS[payload["kind"]], payload)
        return {"value": payload}


def _failed(outcome: Failure, run_id: str) -> OperationFailed:
    """A failure recorded by another process, as an error of this one."""
    return OperationFailed(outcome.error, outcome.retryable, outcome.message, run_id=run_id)
