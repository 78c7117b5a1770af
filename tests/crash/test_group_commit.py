"""Group commit keeps every guarantee: fencing per caller, and durability of what was acked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import rows
from zincir import AgentContext, FencedOut, SQLiteStore

pytestmark = pytest.mark.crash


async def test_fenced_writer_in_a_batch_is_rejected_alone(
    store: SQLiteStore, db_path: Path
) -> None:
    contexts = [
        await AgentContext.create(
            store, name="batch", run_id=f"run-{i}", lease_ttl=timedelta(seconds=30)
        )
        for i in range(64)
    ]
    victim = contexts[17]
    other_store = zincir.open_store(db_path)
    fenced_at = asyncio.Event()
    rejected: list[int] = []
    writes_per_run = 30

    async def drive(ctx: AgentContext) -> None:
        for n in range(writes_per_run):
            if ctx is victim and n == 10:
                thief = await AgentContext.force_recover(other_store, ctx.run_id)
                await thief.close()
                fenced_at.set()
            try:
                await ctx.record_response({"n": n, "run": ctx.run_id})
            except FencedOut:
                assert ctx is victim
                rejected.append(n)

    try:
        await asyncio.gather(*(drive(ctx) for ctx in contexts))
    finally:
        await other_store.close()
    assert fenced_at.is_set()
    assert rejected == list(range(10, writes_per_run))
    stats = store.writer_stats
    assert stats.largest_batch > 1, "the writes were never group-committed"
    for ctx in contexts:
        payloads = [
            json.loads(p)["content"]["n"]
            for (p,) in rows(
                db_path,
                "SELECT payload FROM events WHERE run_id = ? AND type = 'llm_call' ORDER BY seq",
                (ctx.run_id,),
            )
        ]
        expected = list(range(10)) if ctx is victim else list(range(writes_per_run))
        assert payloads == expected, ctx.run_id
        seqs = [
            s
            for (s,) in rows(
                db_path, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (ctx.run_id,)
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1))
    for ctx in contexts:
        await ctx.close()


async def test_one_callers_error_rolls_back_only_its_work(
    store: SQLiteStore, db_path: Path
) -> None:
    contexts = [await AgentContext.create(store, name="batch", run_id=f"r{i}") for i in range(16)]
    await contexts[3].record_response("first", [zincir.ToolCall("dup", "t")])
    results = await asyncio.gather(
        *(ctx.record_response("second", [zincir.ToolCall("dup", "t")]) for ctx in contexts),
        return_exceptions=True,
    )
    assert isinstance(results[3], zincir.DuplicateToolCall)
    assert all(isinstance(r, int) for i, r in enumerate(results) if i != 3)
    assert rows(db_path, "SELECT COUNT(*) FROM events WHERE run_id = 'r3'") == [(3,)]
    assert rows(db_path, "SELECT COUNT(*) FROM events WHERE run_id = 'r4'") == [(3,)]
    for ctx in contexts:
        await ctx.close()


def test_sigkill_during_batches_loses_only_unacknowledged_writes(tmp_path: Path) -> None:
    db = tmp_path / "acks.db"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    child = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "crash" / "acker.py"), str(db), "32"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    acked: list[tuple[str, int, int]] = []
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        for line in child.stdout:
            _, run_id, seq, n = line.split()
            acked.append((run_id, int(seq), int(n)))
            if len(acked) >= 3000:
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    stored = {
        (run_id, seq): json.loads(payload)["content"]["n"]
        for run_id, seq, payload in rows(
            db, "SELECT run_id, seq, payload FROM events WHERE type = 'llm_call'"
        )
    }
    missing = [ack for ack in acked if stored.get((ack[0], ack[1])) != ack[2]]
    assert missing == [], f"{len(missing)} acknowledged writes were lost"
    for r in range(32):
        seqs = [
            s
            for (s,) in rows(
                db, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (f"ack-{r}",)
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize("writers", [1, 4])
async def test_close_with_writes_in_flight_answers_every_caller(
    db_path: Path, writers: int
) -> None:
    """A close that lands between a write's submit and its batch fails the write cleanly."""
    store = zincir.open_store(db_path)
    contexts = [
        await AgentContext.create(store, name="late", run_id=f"late-{i}") for i in range(4)
    ]  # four live owners: writes are batched, not solo
    writes = [
        asyncio.ensure_future(ctx.record_response("racing close")) for ctx in contexts[:writers]
    ]
    await asyncio.sleep(0)  # the writes are submitted, their batch not yet flushed
    await store.close()
    results = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 5)
    assert all(isinstance(result, zincir.StoreError) for result in results), results
    for ctx in contexts:
        await ctx._heartbeat.stop()
