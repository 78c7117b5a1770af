"""Assemble a ``ModelResponse`` from stream parts, whatever the chunk boundaries were."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from .._errors import InvalidDocument
from ..contract.payloads import (
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
)
from ._tools import call_part

__all__ = ["Emit", "StreamEvent", "assemble_stream", "discard", "tee"]

StreamEvent = PartStart | PartDelta | PartEnd | StreamUsage | ToolReturnPart
"""What ``agent.run_stream`` yields: the model's stream parts and each tool's result."""
Emit = Callable[[StreamEvent], Awaitable[None]]


async def discard(event: StreamEvent) -> None:
    """The emit of a streamed run resumed without a reader: its parts go nowhere."""


async def tee(parts: AsyncIterable[StreamPart], emit: Emit) -> AsyncIterator[StreamPart]:
    """``parts``, each passed to ``emit`` as it goes by."""
    async for part in parts:
        await emit(part)
        yield part


@dataclass(slots=True)
class _Open:
    start: PartStart
    chunks: list[str] = field(default_factory=list)


async def assemble_stream(
    parts: AsyncIterable[StreamPart],
) -> tuple[list[TextPart | ToolCallPart], Usage]:
    """The complete parts (in index order) and usage of a stream; InvalidDocument if broken."""
    opened: dict[int, _Open] = {}
    finished: dict[int, TextPart | ToolCallPart] = {}
    usage = Usage()
    async for part in parts:
        if isinstance(part, PartStart):
            if part.index in opened or part.index in finished:
                raise InvalidDocument(f"stream part {part.index} started twice")
            opened[part.index] = _Open(part)
        elif isinstance(part, PartDelta):
            _open(opened, part.index).chunks.append(part.delta)
        elif isinstance(part, PartEnd):
            finished[part.index] = _finish(opened.pop(part.index, None), part.index)
        elif isinstance(part, StreamUsage):
            usage = part.usage
        else:
            raise InvalidDocument(f"a stream yielded {type(part).__name__}, not a stream part")
    if opened:
        raise InvalidDocument(f"stream parts {sorted(opened)} never ended")
    return [finished[index] for index in sorted(finished)], usage


def _open(opened: dict[int, _Open], index: int) -> _Open:
    if index not in opened:
        raise InvalidDocument(f"stream part {index} has a delta outside start/end")
    return opened[index]


def _finish(part: _Open | None, index: int) -> TextPart | ToolCallPart:
    if part is None:
        raise InvalidDocument(f"stream part {index} ended without starting")
    text = "".join(part.chunks)
    start = part.start
    if start.part_kind == "text":
        return TextPart(text=text)
    assert start.tool_call_id is not None and start.tool_name is not None
    return call_part(start.tool_call_id, start.tool_name, text)
