"""``deliver_event``: an application event sent once through the ``event_delivery`` worker.

Lifecycle hooks are local observers and may see replays; an event that must be delivered
exactly under one identity goes through here, and a replay returns its stored record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import InvalidInput
from ..contract import Invocation, OperationKind, Record, Success
from ..contract.payloads import EventDelivery
from ..streams import EVENT
from ..streams._writer import live_writer
from ._binding import DurableBinding
from ._durable import success
from ._preflight import check_handlers

__all__ = ["deliver_event"]


async def deliver_event(
    binding: DurableBinding,
    step_id: str,
    sequence: int,
    event: EventDelivery | Mapping[str, Any],
) -> Record:
    """Deliver ``event`` as ``step_id`` #``sequence`` (under the binding's namespace).

    The caller chooses a semantic step id and a deterministic sequence; the same identity
    returns the stored record without delivering again. A failure or suspension record is
    raised (``OperationFailed``, ``Suspend``). Sent from a streamed run's loop (a tool or
    hook of it, in its process), the event is also an ``event`` item of the run's stream.
    """
    if not isinstance(binding, DurableBinding):
        raise InvalidInput("binding must be a zincir.agent.DurableBinding")
    run_id = binding.run_id
    if isinstance(event, Mapping):
        event = EventDelivery.from_dict(event)
    if not isinstance(event, EventDelivery):
        raise InvalidInput(
            "event must be a zincir.payloads.EventDelivery (or its JSON object form)",
            run_id=run_id,
        )
    check_handlers(binding, {OperationKind.EVENT_DELIVERY: "deliver_event was called"})
    handler_id = binding.handlers.event_delivery
    assert handler_id is not None
    invocation = Invocation(
        run_id=run_id,
        step_id=binding.step_id(step_id) if isinstance(step_id, str) else step_id,
        sequence=sequence,
        kind=OperationKind.EVENT_DELIVERY,
        handler_id=handler_id,
        input_json=event.to_json(),
    )
    invocation.validate()
    record = await binding.runtime.execute(invocation)
    success(record)
    assert isinstance(record.outcome, Success)
    writer = live_writer(run_id)  # sent from the run's streamed loop: it joins the stream
    if writer is not None:
        body = {"step_id": invocation.step_id, "sequence": sequence, "event": event.to_dict()}
        await writer.put(EVENT, body, f"event:{invocation.step_id}#{sequence}")
    return record
