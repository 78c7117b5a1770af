"""Streams a durable agent run into a CheckpointedStreamSink, for the crash test.

    python stream_worker.py DB CHECKPOINTS OUT RUN_ID SEGMENT --store file|sql
        [--hang-after K --hang-in-sink]

The sink appends ``<ordinal>\\t<event json>`` to OUT and fsyncs it. With ``--hang-after K``
the process prints ``inside`` and sleeps until killed: when the sink is called for the
(K+1)th time, before writing (ordinals 0..K-1 written and committed), or with
``--hang-in-sink`` right after writing the Kth line (ordinal K-1 written, not committed).
Otherwise it prints ``output <text>`` and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from zincir.agent import (  # noqa: E402
    Agent,
    AgentRunResult,
    DurableBinding,
    FunctionModel,
    Handlers,
    StreamEvent,
    serve,
    tool,
)
from zincir.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolCallPart,
    Usage,
)
from zincir.restart import (  # noqa: E402
    CheckpointedStreamSink,
    FileRestartStore,
    RestartStore,
    SQLRestartStore,
)

HANDLERS = Handlers(model_stream="sink-stream", tool_call="sink-tools")
LEASE_TTL = timedelta(milliseconds=300)
CLAIM_TTL = timedelta(milliseconds=300)
PROMPT = "Count, then tell me."
PARTS = 8  # text parts per model response; each one replays as start, delta, end


def script(request: ModelRequest) -> ModelResponse:
    """Request 0: text parts and a call to ``count``; request 1: more text, then done."""
    number = sum(1 for message in request.messages if message.role == "assistant")
    parts: list[TextPart | ToolCallPart] = [
        TextPart(text=f"response {number} part {i}: " + " ".join(f"w{j}" for j in range(6)))
        for i in range(PARTS)
    ]
    if number == 0:
        parts.append(ToolCallPart(tool_call_id="c1", tool_name="count", arguments={"n": 3}))
    return ModelResponse(parts=parts, usage=Usage(input_tokens=5 + number, output_tokens=9))


async def chunks(request: ModelRequest) -> AsyncIterator[StreamPart]:
    """The scripted response as a provider would stream it: many small deltas per part."""
    response = script(request)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            yield PartStart(index=index, part_kind="text")
            for word in part.text.split(" "):
                yield PartDelta(index=index, delta=word + " ")
        else:
            yield PartStart(
                index=index,
                part_kind="tool_call",
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
            )
            yield PartDelta(index=index, delta='{"n": 3}')
        yield PartEnd(index=index)
    yield StreamUsage(usage=response.usage)


def build() -> Agent:
    @tool
    async def count(n: int) -> dict[str, Any]:
        """Count to n."""
        return {"counted": list(range(n))}

    return Agent(FunctionModel(script, chunks), name="sink-streamer", tools=[count])


def binding(store: zincir.SQLiteStore, agent: Agent, run_id: str) -> DurableBinding:
    """``agent`` served on a LocalRuntime over ``store``, bound to ``run_id``."""
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry, claim_ttl=CLAIM_TTL, poll_interval=0.02)
    return DurableBinding(runtime, run_id, HANDLERS, lease_ttl=LEASE_TTL)


def restart_store(kind: str, store: zincir.SQLiteStore, folder: Path) -> RestartStore:
    """A real restart store: checkpoint files in ``folder``, or rows in the run's database."""
    return FileRestartStore(folder) if kind == "file" else SQLRestartStore(store)


def append(path: Path, line: str) -> None:
    """Append one line and fsync it, so a SIGKILL right after cannot lose it."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def line_sink(
    out: Path, before: Callable[[], None] = lambda: None, after: Callable[[], None] = lambda: None
) -> tuple[Callable[[StreamEvent], None], Callable[[CheckpointedStreamSink], None]]:
    """A sink writing ``<ordinal>\\t<json>`` lines, and the call that tells it its stream
    sink (whose ``delivered`` is the ordinal being delivered)."""
    owner: list[CheckpointedStreamSink] = []

    def sink(event: StreamEvent) -> None:
        before()
        append(out, f"{owner[0].delivered}\t{event.model_dump_json()}")
        after()

    return sink, owner.append


def hang() -> None:
    """Say so on stdout, then block the event loop until the test kills the process."""
    sys.stdout.write("inside\n")
    sys.stdout.flush()
    while True:
        time.sleep(3600)


async def main(args: argparse.Namespace) -> None:
    calls = 0

    def before() -> None:
        nonlocal calls
        calls += 1
        if args.hang_after is not None and not args.hang_in_sink and calls > args.hang_after:
            hang()

    def after() -> None:
        if args.hang_after is not None and args.hang_in_sink and calls >= args.hang_after:
            hang()

    store = zincir.open_store(args.db)
    try:
        sink, tell = line_sink(Path(args.out), before, after)
        stream_sink = CheckpointedStreamSink(
            restart_store(args.store, store, Path(args.checkpoints)),
            args.run_id,
            args.segment,
            sink,
        )
        tell(stream_sink)
        agent = build()
        stream = agent.run_stream(PROMPT, durable=binding(store, agent, args.run_id))
        result: AgentRunResult = await stream_sink.consume(stream)
        sys.stdout.write(f"output {result.output}\n")
        sys.stdout.flush()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("checkpoints")
    parser.add_argument("out")
    parser.add_argument("run_id")
    parser.add_argument("segment")
    parser.add_argument("--store", choices=["file", "sql"], required=True)
    parser.add_argument("--hang-after", type=int)
    parser.add_argument("--hang-in-sink", action="store_true")
    asyncio.run(main(parser.parse_args()))
