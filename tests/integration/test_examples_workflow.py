"""The workflow examples run as subprocesses, exit 0 and leave the runs they describe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import event_types, rows


def run_example(name: str, db: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ZINCIR_DATABASE_PATH": str(db)}
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / name)],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_automatic_resume_example(tmp_path: Path) -> None:
    db = tmp_path / "resume.db"
    out = run_example("automatic_resume.py", db)
    assert "[first process]" in out and "dying without releasing the lease" in out
    assert "waiting for that lease to expire" in out
    assert "lease token 2" in out and "pending tools: ['call_1']" in out
    assert "is completed after 1 claim(s)" in out
    [(run_id, status, owner, attempts)] = rows(
        db, "SELECT id, status, lease_owner, attempts FROM agent_runs"
    )
    assert (status, owner, attempts) == ("completed", None, 1)
    assert event_types(db, run_id) == [
        "state_transition",
        "llm_call",
        "tool_call",
        "run_claimed",
        "tool_result",
        "state_transition",
    ]


def test_approval_wait_example(tmp_path: Path) -> None:
    db = tmp_path / "approval.db"
    out = run_example("approval_wait.py", db)
    assert "waiting for approval" in out
    assert "[approver] sent the approval as message 1; a retried click returned message 1" in out
    assert "approved by alice@example.com" in out and "run completed" in out
    [(run_id, status, result)] = rows(db, "SELECT id, status, result FROM agent_runs")
    assert status == "completed" and '"approved_by":"alice@example.com"' in result
    assert rows(db, "SELECT COUNT(*), COUNT(received_at), MIN(from_run_id) FROM messages") == [
        (1, 1, None)
    ]
    assert event_types(db, run_id) == [
        "state_transition",
        "step_completed",
        "timer_set",
        "message_received",
        "step_completed",
        "state_transition",
    ]
