"""Eight processes append to separate runs of one database at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import zincir
from tests.conftest import REPO
from tests.helpers import rows

APPENDER = REPO / "tests" / "crash" / "appender.py"


def test_eight_writer_processes(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    zincir.open_store(db).close_sync()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    per_process = 150
    procs = [
        subprocess.Popen(
            [sys.executable, str(APPENDER), str(db), f"run-{i}", str(per_process)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "locked" not in err.lower() and "busy" not in err.lower()
    for i in range(8):
        seqs = [
            s
            for (s,) in rows(
                db, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (f"run-{i}",)
            )
        ]
        # created transition + (llm_call + tool_call) per response + completion transition
        assert seqs == list(range(1, 2 * per_process + 3))
    assert rows(db, "SELECT COUNT(*) FROM agent_runs WHERE status = 'completed'") == [(8,)]
