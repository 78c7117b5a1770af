"""The capability's event handler behind a ``CheckpointedStreamSink``: a unit re-executed after
a restart (the model stream that was in flight, an event delivery whose record never
committed) passes by the events its killed predecessor already delivered.

Each unit is its own segment, ``<stream_segment>.<step>.<sequence>`` under the run id: a
replayed unit delivers nothing, so only a re-executed one counts ordinals again. An event
is committed once the handler asks for the next one (or the stream ends); the last event
before a crash may be delivered twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextvars import ContextVar
from typing import Any, cast

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.tools import AgentDepsT, RunContext

from ..._errors import InvalidInput
from ...restart import CheckpointedStreamSink, RestartStore

__all__ = ["CURRENT_UNIT", "checkpointed"]

CURRENT_UNIT: ContextVar[tuple[str, int] | None] = ContextVar(
    "zincir_pydantic_ai_unit", default=None
)
"""The (step id, sequence) of the unit whose body is running."""


def checkpointed(
    handler: EventStreamHandler[AgentDepsT], store: RestartStore, segment: str
) -> EventStreamHandler[AgentDepsT]:
    """``handler``, skipping the events of a unit that a restart store has seen delivered."""
    if not isinstance(store, RestartStore):
        raise InvalidInput(
            "restart_store must be a zincir.restart store (FileRestartStore, SQLRestartStore), "
            f"not {type(store).__name__}"
        )

    async def deliver(ctx: RunContext[AgentDepsT], events: AsyncIterable[AgentStreamEvent]) -> None:
        unit = CURRENT_UNIT.get()
        if unit is None or ctx.run_id is None:
            await handler(ctx, events)
            return
        step, sequence = unit
        sink = CheckpointedStreamSink(store, ctx.run_id, f"{segment}.{step}.{sequence}", _accept)
        await handler(ctx, _unseen(sink, events))

    return deliver


async def _unseen(
    sink: CheckpointedStreamSink, events: AsyncIterable[AgentStreamEvent]
) -> AsyncIterator[AgentStreamEvent]:
    """The events past the committed ordinals; each committed when the next is asked for."""
    delivered = await sink.load()
    ordinal = 0
    async for event in events:
        if ordinal >= delivered:
            yield event
        await sink(cast(Any, event))  # commits the ordinal, or passes a committed one by
        ordinal += 1


def _accept(event: object) -> None:
    """The handler itself receives the events; the sink only counts and commits them."""
