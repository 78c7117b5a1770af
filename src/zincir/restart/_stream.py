"""Deliver a run's stream events to a sink at least once, skipping what a restart already sent.

A durable ``agent.run_stream`` replays the same events in the same order, so an event's
position in the stream (its ordinal) names it. ``CheckpointedStreamSink`` commits each
ordinal to a ``RestartStore`` after the sink accepted it; a restarted worker with the same
segment id passes the committed ordinals by and delivers the rest. The last ordinal before a
crash may be delivered twice (the sink ran, the commit did not).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias, overload

from .._errors import InvalidInput, RecordFormatError, RevisionConflict
from .._validate import MAX_ID_BYTES, check_id, name_problem, shown
from ._protocol import RestartStore

if TYPE_CHECKING:  # zincir.agent imports zincir.restart: no import back at load time
    from ..agent._agent import AgentStream
    from ..agent._result import AgentRunResult
    from ..agent._stream import StreamEvent

__all__ = ["CheckpointedStreamSink", "StreamSink"]

StreamSink: TypeAlias = "Callable[[StreamEvent], Awaitable[None] | None]"
"""Where events go: a sync or async callable taking one stream event."""

_PREFIX: Final = "stream:"


class CheckpointedStreamSink:
    """Delivers stream events to ``sink`` and commits each ordinal after the sink succeeds.

    A restarted worker with the same ``segment_id`` skips committed ordinals (the last one
    may be delivered again). Start a new segment after an approval resume or a change that
    alters the order of events: ordinals only name events of one replay-stable stream.
    """

    def __init__(self, store: RestartStore, run_id: str, segment_id: str, sink: StreamSink) -> None:
        self._run_id = check_id(run_id)
        problem = name_problem("segment_id", segment_id, max_bytes=MAX_ID_BYTES - len(_PREFIX))
        if problem is not None:
            raise InvalidInput(problem, run_id=self._run_id)
        if not isinstance(store, RestartStore):
            raise InvalidInput(
                f"store must be a RestartStore (load, save, remove), not {shown(store)}",
                run_id=self._run_id,
            )
        if not callable(sink):
            raise InvalidInput(
                f"sink must be a callable taking one stream event, not {shown(sink)}",
                run_id=self._run_id,
            )
        self._store = store
        self._segment_id = segment_id
        self._sink = sink
        self._checkpoint_id = _PREFIX + segment_id
        self._lock = asyncio.Lock()
        self._delivered: int | None = None  # committed ordinals; None until loaded
        self._next = 0  # the ordinal of the next event passed in
        self._broken: str | None = None

    @property
    def run_id(self) -> str:
        """The run whose stream this is (a checkpoint key; it need not name a zincir run)."""
        return self._run_id

    @property
    def segment_id(self) -> str:
        """The segment of the run's stream whose ordinals this sink counts."""
        return self._segment_id

    @property
    def checkpoint_id(self) -> str:
        """The restart checkpoint that holds this segment's count: ``stream:<segment_id>``."""
        return self._checkpoint_id

    @property
    def delivered(self) -> int:
        """How many ordinals are committed (0, 1, … delivered); InvalidInput before ``load``."""
        if self._delivered is None:
            raise InvalidInput(
                f"stream segment {self._segment_id!r} is not loaded yet: await load() "
                "or pass an event first",
                run_id=self._run_id,
            )
        return self._delivered

    async def load(self) -> int:
        """Read the committed count from the store (once) and return it."""
        async with self._lock:
            return await self._load()

    async def __call__(self, event: StreamEvent) -> None:
        """Give ``event`` the next ordinal; deliver and commit it unless already committed."""
        async with self._lock:
            if self._broken is not None:
                raise InvalidInput(self._broken, run_id=self._run_id)
            delivered = await self._load()
            ordinal = self._next
            self._next += 1
            if ordinal < delivered:
                return
            try:
                outcome = self._sink(event)
                if inspect.isawaitable(outcome):
                    await outcome
                await self._commit(ordinal)
            except BaseException:
                self._broken = (
                    f"stream segment {self._segment_id!r} stopped at ordinal {ordinal} after "
                    "an error; replay the stream into a new CheckpointedStreamSink"
                )
                raise

    @overload
    async def consume(self, stream: AgentStream) -> AgentRunResult: ...  # type: ignore[overload-overlap]
    @overload
    async def consume(self, stream: AsyncIterable[StreamEvent]) -> None: ...
    async def consume(self, stream: AsyncIterable[StreamEvent]) -> AgentRunResult | None:
        """Pass every event of ``stream`` through this sink; an ``AgentStream``'s result."""
        from ..agent._agent import AgentStream

        iterator = aiter(stream)
        try:
            async for event in iterator:
                await self(event)
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()
        return stream.result if isinstance(stream, AgentStream) else None

    async def _load(self) -> int:
        if self._delivered is None:
            checkpoint = await self._store.load(self._run_id, self._checkpoint_id)
            count = 0 if checkpoint is None else self._count(checkpoint.payload)
            if checkpoint is not None and checkpoint.revision != count:
                raise RecordFormatError(
                    f"restart checkpoint {self._checkpoint_id!r} is at revision "
                    f"{checkpoint.revision} but counts {count} delivered events",
                    run_id=self._run_id,
                )
            self._delivered = count
        return self._delivered

    def _count(self, payload: Any) -> int:
        count = payload.get("delivered") if isinstance(payload, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RecordFormatError(
                f"restart checkpoint {self._checkpoint_id!r} holds {shown(payload)}, "
                'not a stream segment\'s {"delivered": <count>}',
                run_id=self._run_id,
            )
        return count

    async def _commit(self, ordinal: int) -> None:
        count = ordinal + 1
        try:
            await self._store.save(self._run_id, self._checkpoint_id, count, {"delivered": count})
        except RevisionConflict as error:
            raise RevisionConflict(
                f"stream segment {self._segment_id!r}: committing ordinal {ordinal} conflicts "
                f"with the stored checkpoint (another worker advanced it?): {error.detail}",
                run_id=self._run_id,
            ) from error
        self._delivered = count
