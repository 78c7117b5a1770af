"""Test seams for code built on zincir (as ``temporalio.testing`` is for Temporal).

``FakeClock`` is a clock that only moves when the test moves it. Hand it to the store as its
clock (``open_store(path, clock=clock)``) and its ``sleep`` to a workflow as its sleeper
(``WorkflowContext(..., sleeper=clock.sleep)``): leases, timers and deadlines then expire
when the test says so, and nothing really waits.

``crash_point(name)`` marks a boundary where a fault-injection test may kill the process:
a no-op unless ``ZINCIR_CRASH_AT=name[:nth]`` is set (or ``arm_crash_point`` was called in
a process forked after import), then SIGKILL on that point's ``nth`` hit. ``CRASH_POINTS``
names every boundary zincir marks; ``count_crash_points()`` then ``crash_census()`` tell
how often a workload reaches each.

``capture_spans()`` collects the OpenTelemetry spans zincir emits while it is open (needs
``opentelemetry-sdk``)::

    with capture_spans() as spans:
        await runner.run(agent, "hi", run_id="r1")
    assert [s.name for s in spans if s.name.startswith("execute_tool")] == [...]
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from ._crash import CRASH_POINTS, crash_point
from ._crash import arm as arm_crash_point
from ._crash import census as crash_census
from ._crash import count as count_crash_points
from ._crash import disarm as disarm_crash_points

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "CRASH_POINTS",
    "FakeClock",
    "arm_crash_point",
    "capture_spans",
    "count_crash_points",
    "crash_census",
    "crash_point",
    "disarm_crash_points",
]

_START: Final = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """The store's clock and a workflow's sleeper for tests: sleeping moves the clock.

    Calling it returns ``now`` (timezone-aware UTC; 2030-01-01 unless ``start`` says
    otherwise). ``advance(seconds)`` moves it forward; ``await sleep(seconds)`` records the
    duration in ``slept``, advances the clock by it and yields to the event loop once.
    """

    def __init__(self, start: datetime = _START) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += timedelta(seconds=seconds)

    async def sleep(self, seconds: float) -> None:
        """Record the sleep, move the clock by it, and let other tasks run once."""
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)


@contextmanager
def capture_spans() -> Iterator[list[ReadableSpan]]:
    """Collect the spans that end while the block runs, in the order they end.

    The list is filled when the block exits. It adds an in-memory exporter to the global
    SDK ``TracerProvider`` (setting one first if none is set), so spans also go wherever
    the application sends them. Needs ``opentelemetry-sdk`` (a test dependency).
    """
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )
    except ImportError as error:
        raise ImportError(
            "capture_spans needs the OpenTelemetry SDK: pip install opentelemetry-sdk"
        ) from error
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        if not isinstance(provider, trace.ProxyTracerProvider):
            raise RuntimeError(
                f"capture_spans needs the SDK's TracerProvider; the global one is {provider!r}"
            )
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans: list[ReadableSpan] = []
    try:
        yield spans
    finally:
        spans.extend(exporter.get_finished_spans())
        exporter.shutdown()  # the processor stays on the provider, exporting nothing more
