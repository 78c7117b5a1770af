"""The kill sweep at short counts, and its checks catching each kind of damage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from reliability import crash_sweep
from reliability._sweep_workload import graph_values, run_job

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.crash
def test_the_short_sweep_meets_every_target(tmp_path: Path) -> None:
    """In its own process: the sweep forks, which a threaded test process must not do."""
    out = tmp_path / "sweep.json"
    child = subprocess.run(
        [sys.executable, "-m", "reliability", "--only", "crash_sweep", "--short", "--json", out],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.read_text())["crash_sweep"]
    assert report["ok"], child.stderr
    figures = report["figures"]
    assert figures["acknowledged writes lost (SQLite)"] == 0
    assert figures["jobs killed (SQLite)"] >= 15
    assert figures.get("acknowledged writes lost (PostgreSQL)") == 0


@pytest.fixture
async def finished(tmp_path: Path) -> crash_sweep.Lane:
    """One job run to completion with no kill: every check passes on it."""
    lane = crash_sweep.Lane(tmp_path, 0)
    await run_job(lane.db, lane.ledger, lane.acks, "j1")
    verdict = await verified(lane)
    assert verdict.ok and verdict.completed, verdict
    return lane


async def verified(lane: crash_sweep.Lane) -> crash_sweep.Verdict:
    """``verify`` with the graph's values read here (the sweep forks to read them)."""
    graph = await graph_values(lane.db, "lg-j1")
    assert graph is not None and len(graph) == 3
    return crash_sweep.verify(lane, "j1", graph=graph)


def edit(path: str, sql: str, *params: object) -> None:
    conn = apsw.Connection(path)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


async def test_a_lost_acknowledged_step_is_caught(finished: crash_sweep.Lane) -> None:
    edit(finished.db, "DELETE FROM step_claims WHERE run_id = 'wf-j1' AND name = 's1'")
    assert (await verified(finished)).lost == 1


async def test_a_record_the_ledger_disagrees_with_is_caught(finished: crash_sweep.Lane) -> None:
    edit(
        finished.db,
        "UPDATE events SET payload = json_set(payload, '$.result', 'other') "
        "WHERE run_id = 'wf-j1' AND type = 'step_completed' AND payload ->> '$.name' = 's0'",
    )
    verdict = await verified(finished)
    assert verdict.mismatched == 1 and verdict.lost == 1


async def test_a_gap_in_the_log_is_caught(finished: crash_sweep.Lane) -> None:
    edit(finished.db, "DELETE FROM events WHERE run_id = 'ag-j1' AND seq = 2")
    assert (await verified(finished)).gaps == 1


async def test_acknowledged_work_run_again_is_caught(finished: crash_sweep.Lane) -> None:
    edit(
        finished.ledger,
        "INSERT INTO calls (key, at, pid) VALUES ('ag-j1/c0', ?, 0)",
        time.monotonic_ns(),
    )
    verdict = await verified(finished)
    assert verdict.repeated == 1 and verdict.reexecuted == 1


async def test_an_unfinished_run_is_caught(finished: crash_sweep.Lane) -> None:
    edit(finished.db, "UPDATE agent_runs SET status = 'running' WHERE id = 'ag-j1'")
    verdict = await verified(finished)
    assert not verdict.completed and not verdict.ok


async def test_a_graph_whose_values_differ_from_the_ledger_is_caught(
    finished: crash_sweep.Lane,
) -> None:
    verdict = crash_sweep.verify(finished, "j1", graph=["a", "b", "c"])
    assert verdict.mismatched == 1 and verdict.lost == 1
