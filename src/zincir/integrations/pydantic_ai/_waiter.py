"""Durable external-event waits (``RequestInput``, ``AskUser``) on zincir messages.

A wait claims a sequence and hands out the token ``zincir:<run>:<name>:<seq>``. ``ask`` runs
once as an ``event_delivery`` unit. When it did not answer, the run receives the first
message sent to it on the token's topic (``resolve_event``); the received payload is kept by
an ``approval_resume`` operation, so every replay applies the same answer. Until a message
arrives the run is parked on that topic and ``agent.run`` ends with ``WorkflowSuspended``;
calling it again after the resolution finishes the run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from pydantic_ai.durable_exec import ExternalEventError, ExternalEventWaiter, record_durable_unit

from ..._errors import Suspend, WorkflowSuspended
from ..._json import dumps
from ...contract import Invocation, OperationKind, Success
from ...store import Store
from ._identity import canonical, handler_id, step_id
from ._run import RunScope

if TYPE_CHECKING:
    from ._capability import ZincirDurability

__all__ = ["ZincirWaiter", "resolve_event"]


async def resolve_event(store: Store, run_id: str, token: str, payload: object) -> int:
    """Answer the wait ``token`` of ``run_id`` (from any process); the first answer wins."""
    text = dumps(payload, what="external event payload", run_id=run_id)
    return await store.send_message(run_id, token, text, key=token)


class ZincirWaiter(ExternalEventWaiter):
    """The waiter installed for each run of a ZincirDurability agent."""

    def __init__(self, durability: ZincirDurability[Any], scope: RunScope) -> None:
        self._durability = durability
        self._scope = scope

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,
    ) -> JsonValue:
        scope = self._scope
        backend = self._durability.get_durable_operation_backend()
        resume_step = step_id(scope.agent, f"external.{name}")
        sequence = scope.claim(resume_step)
        token = f"zincir:{scope.run_id}:{name}:{sequence}"
        document = canonical({"name": name, "token": token})

        async def ask_unit(invocation: Invocation, request: Any) -> Any:
            answer = await ask(token)
            if answer is None:
                raise Suspend("approval", {"token": token})
            return {"value": answer}

        asked = await backend.run_unit(
            scope,
            self._invocation(
                f"{resume_step}.ask", sequence, OperationKind.EVENT_DELIVERY, document
            ),
            ask_unit,
        )
        record_durable_unit(executed=False)
        if isinstance(asked.outcome, Success):
            value: JsonValue = json.loads(asked.outcome.output_json)["value"]
            return value
        received = await self._receive(token, timeout)
        if received is None:
            raise ExternalEventError(f"[run {scope.run_id}] no resolution of {token} in {timeout}")

        async def resume_unit(invocation: Invocation, request: Any) -> Any:
            return {"value": received[0]}

        resumed = await backend.run_unit(
            scope,
            self._invocation(resume_step, sequence, OperationKind.APPROVAL_RESUME, document),
            resume_unit,
        )
        assert isinstance(resumed.outcome, Success)
        result: JsonValue = json.loads(resumed.outcome.output_json)["value"]
        return result

    def _invocation(
        self, step_name: str, sequence: int, kind: OperationKind, document: str
    ) -> Invocation:
        return Invocation(
            run_id=self._scope.run_id,
            step_id=step_name,
            sequence=sequence,
            kind=kind,
            handler_id=handler_id(self._scope.agent),
            input_json=document,
        )

    async def _receive(self, token: str, timeout: timedelta | None) -> tuple[Any] | None:
        """The resolution's payload (in a 1-tuple), None on timeout; parks the run (raising
        WorkflowSuspended) while none has arrived."""
        scope = self._scope
        store = self._durability.store
        if scope.ctx is None:
            attempt = await store.replayed_receive(scope.run_id, token)
            if attempt is None:
                raise WorkflowSuspended(scope.run_id, "message", token, None)
        else:
            scope.ctx.check_lease()
            attempt = await store.receive_attempt(scope.ctx.lease, token, token, timeout)
        if not attempt.done:
            raise WorkflowSuspended(scope.run_id, "message", token, attempt.deadline)
        if attempt.value is None:
            return None
        return (attempt.value.payload,)
