"""CheckpointedStreamSink: each ordinal committed after the sink accepts it, skipped on a
rerun of the same segment; a worker killed mid-stream resumes after its last commit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import REPO
from tests.restart.stream_worker import PROMPT, binding, build, line_sink, restart_store
from zincir.agent import StreamEvent
from zincir.payloads import PartDelta, ToolReturnPart
from zincir.restart import CheckpointedStreamSink, RestartStore

WORKER = Path(__file__).with_name("stream_worker.py")
KINDS = ["file", "sql"]


@pytest.fixture(params=KINDS)
async def restart(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RestartStore]:
    """A real restart store: a folder of checkpoint files, or a SQLite file's table."""
    store = zincir.open_store(tmp_path / "x.db")
    try:
        yield restart_store(request.param, store, tmp_path / "checkpoints")
    finally:
        await store.close()


def events(count: int) -> list[StreamEvent]:
    """``count`` distinct stream events, as a stream would yield them."""
    return [PartDelta(index=0, delta=f"chunk {n}") for n in range(count)]


def deltas(seen: list[StreamEvent]) -> list[str]:
    return [e.delta for e in seen if isinstance(e, PartDelta)]


async def yielding(items: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for item in items:
        yield item


# -- delivery and commits ------------------------------------------------------------------


async def test_each_ordinal_is_committed_only_after_the_sink_accepts_it(
    restart: RestartStore,
) -> None:
    during: list[tuple[str, int, int | None]] = []
    stream_sink: CheckpointedStreamSink

    async def sink(event: StreamEvent) -> None:
        await asyncio.sleep(0)
        stored = await restart.load("run-1", "stream:answer")
        assert isinstance(event, PartDelta)
        during.append((event.delta, stream_sink.delivered, stored.revision if stored else None))

    stream_sink = CheckpointedStreamSink(restart, "run-1", "answer", sink)
    assert await stream_sink.load() == 0 and stream_sink.delivered == 0
    for event in events(4):
        await stream_sink(event)
        stored = await restart.load("run-1", "stream:answer")
        assert stored is not None and stored.revision == stream_sink.delivered
        assert stored.payload == {"delivered": stream_sink.delivered}
    assert during == [("chunk 0", 0, None), ("chunk 1", 1, 1), ("chunk 2", 2, 2), ("chunk 3", 3, 3)]
    assert stream_sink.delivered == 4 and stream_sink.checkpoint_id == "stream:answer"


async def test_a_rerun_of_the_segment_skips_committed_ordinals(restart: RestartStore) -> None:
    first: list[StreamEvent] = []
    stream_sink = CheckpointedStreamSink(restart, "run-1", "answer", first.append)
    for event in events(10)[:6]:  # the first worker stops after six events
        await stream_sink(event)

    second: list[StreamEvent] = []
    again = CheckpointedStreamSink(restart, "run-1", "answer", second.append)
    await again.consume(yielding(events(10)))  # a plain iterable has no result to return
    assert deltas(first) == [f"chunk {n}" for n in range(6)]
    assert deltas(second) == [f"chunk {n}" for n in range(6, 10)]
    assert again.delivered == 10

    third: list[StreamEvent] = []
    done = CheckpointedStreamSink(restart, "run-1", "answer", third.append)
    await done.consume(yielding(events(10)))
    assert third == [] and done.delivered == 10


async def test_a_sink_that_raises_leaves_its_ordinal_to_be_delivered_again(
    restart: RestartStore,
) -> None:
    seen: list[str] = []

    def flaky(event: StreamEvent) -> None:
        assert isinstance(event, PartDelta)
        if event.delta == "chunk 2" and "chunk 2" not in seen:
            seen.append("chunk 2")
            raise OSError("the socket closed")
        seen.append(event.delta)

    stream_sink = CheckpointedStreamSink(restart, "run-1", "answer", flaky)
    with pytest.raises(OSError, match="the socket closed"):
        await stream_sink.consume(yielding(events(5)))
    assert stream_sink.delivered == 2
    stored = await restart.load("run-1", "stream:answer")
    assert stored is not None and stored.revision == 2
    with pytest.raises(zincir.InvalidInput, match="stopped at ordinal 2"):
        await stream_sink(events(5)[3])  # ordinals after a failure would be wrong: refused

    again = CheckpointedStreamSink(restart, "run-1", "answer", flaky)
    await again.consume(yielding(events(5)))
    assert seen == ["chunk 0", "chunk 1", "chunk 2", "chunk 2", "chunk 3", "chunk 4"]
    assert again.delivered == 5


async def test_a_new_segment_or_run_delivers_from_ordinal_zero(restart: RestartStore) -> None:
    first: list[StreamEvent] = []
    await CheckpointedStreamSink(restart, "run-1", "before-approval", first.append).consume(
        yielding(events(3))
    )
    resumed: list[StreamEvent] = []
    after = CheckpointedStreamSink(restart, "run-1", "after-approval", resumed.append)
    await after.consume(yielding(events(4)))
    other: list[StreamEvent] = []
    elsewhere = CheckpointedStreamSink(restart, "run-2", "before-approval", other.append)
    await elsewhere.consume(yielding(events(2)))
    assert len(first) == 3 and len(resumed) == 4 and len(other) == 2
    assert after.delivered == 4 and elsewhere.delivered == 2
    kept = await restart.load("run-1", "stream:before-approval")
    assert kept is not None and kept.revision == 3


async def test_another_worker_ahead_on_the_segment_raises_revision_conflict(
    restart: RestartStore,
) -> None:
    slow_seen: list[StreamEvent] = []
    slow = CheckpointedStreamSink(restart, "run-1", "answer", slow_seen.append)
    assert await slow.load() == 0
    fast = CheckpointedStreamSink(restart, "run-1", "answer", lambda event: None)
    for event in events(3):
        await fast(event)

    with pytest.raises(zincir.RevisionConflict, match="'answer': committing ordinal 0") as caught:
        await slow(events(3)[0])
    assert caught.value.run_id == "run-1"
    assert len(slow_seen) == 1 and slow.delivered == 0  # delivered at least once, not committed
    stored = await restart.load("run-1", "stream:answer")
    assert stored is not None and stored.revision == 3
    with pytest.raises(zincir.InvalidInput, match="stopped at ordinal 0"):
        await slow(events(3)[1])


async def test_a_checkpoint_that_is_no_segment_count_is_refused(restart: RestartStore) -> None:
    await restart.save("run-1", "stream:odd", 2, {"cursor": "abc"})
    await restart.save("run-1", "stream:skewed", 2, {"delivered": 5})
    for segment, problem in [("odd", "not a stream segment"), ("skewed", "at revision 2")]:
        stream_sink = CheckpointedStreamSink(restart, "run-1", segment, lambda event: None)
        with pytest.raises(zincir.RecordFormatError, match=problem):
            await stream_sink(events(1)[0])
        with pytest.raises(zincir.InvalidInput, match="not loaded yet"):
            _ = stream_sink.delivered


@pytest.mark.parametrize(
    ("segment", "problem"),
    [
        ("", "must not be empty"),
        ("a\nb", "control character"),
        ("x" * 250, "the limit is 249"),
        (7, "must be a str"),
    ],
)
async def test_a_bad_segment_id_is_refused(
    restart: RestartStore, segment: Any, problem: str
) -> None:
    with pytest.raises(zincir.InvalidInput, match=problem):
        CheckpointedStreamSink(restart, "run-1", segment, print)


async def test_a_bad_store_sink_or_run_id_is_refused(restart: RestartStore) -> None:
    with pytest.raises(zincir.InvalidInput, match="sink must be a callable"):
        CheckpointedStreamSink(restart, "run-1", "answer", "print")  # type: ignore[arg-type]
    with pytest.raises(zincir.InvalidInput, match="store must be a RestartStore"):
        CheckpointedStreamSink({}, "run-1", "answer", print)  # type: ignore[arg-type]
    with pytest.raises(zincir.InvalidInput, match="run id"):
        CheckpointedStreamSink(restart, "", "answer", print)
    stream_sink = CheckpointedStreamSink(restart, "run-1", "x" * 249, print)
    with pytest.raises(zincir.InvalidInput, match="not loaded yet"):
        _ = stream_sink.delivered


# -- with a durable agent ------------------------------------------------------------------


async def test_consume_streams_a_durable_run_and_returns_its_result(
    restart: RestartStore, tmp_path: Path
) -> None:
    store = zincir.open_store(tmp_path / "agent.db")
    try:
        agent = build()
        plain = agent.run_stream(PROMPT, durable=binding(store, agent, "plain"))
        expected = [event async for event in plain]

        seen: list[StreamEvent] = []
        stream_sink = CheckpointedStreamSink(restart, "streamed", "answer", seen.append)
        stream = agent.run_stream(PROMPT, durable=binding(store, agent, "streamed"))
        result = await stream_sink.consume(stream)
        assert result == stream.result and result.output == plain.result.output
        assert seen == expected and stream_sink.delivered == len(expected)
        assert sum(isinstance(e, ToolReturnPart) for e in seen) == 1

        again: list[StreamEvent] = []
        rerun = CheckpointedStreamSink(restart, "streamed", "answer", again.append)
        replayed = agent.run_stream(PROMPT, durable=binding(store, agent, "streamed"))
        assert (await rerun.consume(replayed)).output == result.output and again == []
    finally:
        await store.close()


# -- a worker killed mid-stream ------------------------------------------------------------


def start(tmp_path: Path, kind: str, hang_after: int, in_sink: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    options = ["--store", kind, "--hang-after", str(hang_after)]
    return subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            str(tmp_path / "x.db"),
            str(tmp_path / "checkpoints"),
            str(tmp_path / "out"),
            "killed",
            "answer",
            *options,
            *(["--hang-in-sink"] if in_sink else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def written(out: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line in out.read_text("utf-8").splitlines():
        ordinal, document = line.split("\t")
        yield int(ordinal), json.loads(document)


async def committed(kind: str, tmp_path: Path) -> int:
    store = zincir.open_store(tmp_path / "x.db")
    try:
        reader = CheckpointedStreamSink(
            restart_store(kind, store, tmp_path / "checkpoints"), "killed", "answer", print
        )
        return await reader.load()
    finally:
        await store.close()


@pytest.mark.crash
@pytest.mark.parametrize(
    ("kind", "hang_after", "in_sink"),
    [("file", 40, True), ("sql", 40, True), ("file", 13, False), ("sql", 29, False)],
    ids=["file-in-sink", "sql-in-sink", "file-between-events", "sql-between-events"],
)
async def test_a_worker_killed_mid_stream_resumes_after_its_last_commit(
    tmp_path: Path, kind: str, hang_after: int, in_sink: bool
) -> None:
    out = tmp_path / "out"
    worker = start(tmp_path, kind, hang_after, in_sink)
    try:
        assert worker.stdout is not None
        line = await asyncio.to_thread(worker.stdout.readline)
        assert line == "inside\n", worker.stderr.read() if worker.stderr else ""
        assert [ordinal for ordinal, _ in written(out)] == list(range(hang_after))
        # Killed inside the sink, the last written ordinal is not committed yet.
        assert await committed(kind, tmp_path) == (hang_after - 1 if in_sink else hang_after)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        for pipe in (worker.stdout, worker.stderr):
            if pipe is not None:
                pipe.close()

    store = zincir.open_store(tmp_path / "x.db")
    try:
        agent = build()
        deadline = time.monotonic() + 20
        while True:
            sink, tell = line_sink(out)
            stream_sink = CheckpointedStreamSink(
                restart_store(kind, store, tmp_path / "checkpoints"), "killed", "answer", sink
            )
            tell(stream_sink)
            try:
                stream = agent.run_stream(PROMPT, durable=binding(store, agent, "killed"))
                result = await stream_sink.consume(stream)
                break
            except zincir.LeaseHeld:  # the killed worker's lease has not expired yet
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        fresh = agent.run_stream(PROMPT, durable=binding(store, agent, "fresh"))
        expected = [json.loads(event.model_dump_json()) async for event in fresh]
    finally:
        await store.close()

    assert result.output == fresh.result.output
    resumed_from = hang_after - 1 if in_sink else hang_after
    found = list(written(out))
    assert [ordinal for ordinal, _ in found] == [
        *range(hang_after),
        *range(resumed_from, len(expected)),
    ]
    assert [document for _, document in found] == [
        *expected[:hang_after],
        *expected[resumed_from:],
    ]
    assert stream_sink.delivered == len(expected) == 54
    assert expected[28]["type"] == "tool_return"  # 13 and 29 kill in each model response
