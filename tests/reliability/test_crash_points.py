"""Named crash points: a no-op unarmed, SIGKILL on the chosen hit when armed, counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw

from zincir import testing

WORKFLOW = textwrap.dedent(
    """
    import asyncio, sys
    import zincir
    from zincir import WorkflowContext

    async def main() -> None:
        store = zincir.open_store(sys.argv[1])
        wf = await WorkflowContext.open(store, "run-1")
        for name in ("s0", "s1", "s2"):
            await wf.step(name, lambda name=name: name.upper())
        await wf.complete()
        await store.close()

    asyncio.run(main())
    """
)


def run_child(db: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WORKFLOW, str(db)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def steps(db: Path) -> dict[str, str]:
    conn = apsw.Connection(str(db))
    try:
        return dict(conn.execute("SELECT name, status FROM steps WHERE run_id = 'run-1'"))
    finally:
        conn.close()


def test_an_armed_point_kills_on_its_nth_hit_and_leaves_what_was_committed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "zincir.db"
    child = run_child(db, ZINCIR_CRASH_AT="step.body_done:2")
    assert child.returncode == -9, child.stderr
    assert steps(db) == {"s0": "completed", "s1": "running"}


def test_a_point_armed_past_its_last_hit_never_fires(tmp_path: Path) -> None:
    db = tmp_path / "zincir.db"
    child = run_child(db, ZINCIR_CRASH_AT="step.body_done:4")
    assert child.returncode == 0, child.stderr
    assert steps(db) == {"s0": "completed", "s1": "completed", "s2": "completed"}


def test_the_census_counts_every_hit(tmp_path: Path) -> None:
    out = tmp_path / "census.json"
    child = run_child(tmp_path / "zincir.db", ZINCIR_CRASH_CENSUS=str(out))
    assert child.returncode == 0, child.stderr
    hits = json.loads(out.read_text())
    assert hits["step.claimed"] == hits["step.body_done"] == hits["step.completed"] == 3
    assert hits["store.after_commit"] >= 7  # the run, three claims, three results, complete
    assert set(hits) <= set(testing.CRASH_POINTS)


def test_an_unknown_point_is_refused_when_zincir_is_imported(tmp_path: Path) -> None:
    child = run_child(tmp_path / "zincir.db", ZINCIR_CRASH_AT="store.after_comit")
    assert child.returncode == 1
    assert "unknown crash point 'store.after_comit'" in child.stderr
    assert not (tmp_path / "zincir.db").exists()
    child = run_child(tmp_path / "zincir.db", ZINCIR_CRASH_AT="step.claimed:0")
    assert "the hit number must be an integer ≥ 1" in child.stderr


def test_unarmed_points_do_nothing_and_counting_is_opt_in() -> None:
    testing.crash_point("store.after_commit")
    assert testing.crash_census() == {}
    testing.count_crash_points()
    try:
        testing.crash_point("store.after_commit")
        testing.crash_point("store.after_commit")
        assert testing.crash_census() == {"store.after_commit": 2}
    finally:
        testing.disarm_crash_points()
    assert testing.crash_census() == {}
