"""Kill the reference agent with SIGKILL at each crash boundary, resume, check the database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import rows

pytestmark = pytest.mark.crash

DEMO = REPO / "examples" / "durable_agent.py"
COMPLETE_LOG = [
    "state_transition",
    "llm_call",
    "tool_call",
    "tool_result",
    "checkpoint_proposed",
    "checkpoint_accepted",
    "state_transition",
]


def demo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ZINCIR_RESUME", None)
    env.update(
        ZINCIR_DATABASE_PATH=str(tmp_path / "agent.db"),
        ZINCIR_OUTPUT_DIR=str(tmp_path / "output"),
        PYTHONPATH=str(REPO / "src"),
        **extra,
    )
    return env


def run_demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def kill_at(boundary: str, tmp_path: Path) -> None:
    """Start the demo paused at ``boundary`` and SIGKILL it once it reports the pause."""
    variable = f"ZINCIR_PAUSE_{boundary}_MS"
    env = demo_env(tmp_path, **{variable: "60000"})
    process = subprocess.Popen(
        [sys.executable, str(DEMO)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if line.startswith(f"[demo] pause {variable}"):
                break
        else:
            raise AssertionError(f"demo exited before the pause: {process.stderr.read()}")
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        process.stdout.close()
        assert process.stderr is not None
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL


def check_completed(tmp_path: Path) -> str:
    db = tmp_path / "agent.db"
    runs = rows(db, "SELECT id, status, lease_owner FROM agent_runs")
    assert len(runs) == 1
    run_id, status, owner = runs[0]
    assert (status, owner) == ("completed", None)
    log = rows(
        db, "SELECT seq, type, tool_call_id FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    assert [seq for seq, _, _ in log] == list(range(1, len(log) + 1)), "seq must be gapless"
    assert [kind for _, kind, _ in log] == COMPLETE_LOG
    intents = [call for _, kind, call in log if kind == "tool_call"]
    results = [call for _, kind, call in log if kind == "tool_result"]
    assert intents == results == ["call_1"]
    decisions = rows(db, "SELECT status FROM checkpoints WHERE run_id = ?", (run_id,))
    assert decisions == [("accepted",)]
    files = sorted(p.name for p in (tmp_path / "output").iterdir())
    assert files == ["call_1.json"], files
    content = json.loads((tmp_path / "output" / "call_1.json").read_text())
    assert content == {"report": "zincir demo", "status": "ok", "items": [1, 2, 3]}
    return str(run_id)


def test_demo_runs_to_completion(tmp_path: Path) -> None:
    result = run_demo(demo_env(tmp_path))
    assert result.returncode == 0, result.stderr
    run_id = check_completed(tmp_path)
    assert run_id in result.stdout and "completed" in result.stdout


@pytest.mark.parametrize(
    ("boundary", "log_at_kill", "file_at_kill"),
    [
        ("BEFORE_TOOL", ["state_transition", "llm_call", "tool_call"], False),
        ("AFTER_TOOL", ["state_transition", "llm_call", "tool_call"], True),
        ("AFTER_CHECKPOINT", COMPLETE_LOG[:-1], True),
    ],
)
def test_kill_and_resume(
    tmp_path: Path, boundary: str, log_at_kill: list[str], file_at_kill: bool
) -> None:
    kill_at(boundary, tmp_path)
    db = tmp_path / "agent.db"
    assert [t for (t,) in rows(db, "SELECT type FROM events ORDER BY seq")] == log_at_kill
    assert rows(db, "SELECT status FROM agent_runs") == [("running",)]
    assert (tmp_path / "output" / "call_1.json").exists() == file_at_kill

    resumed = run_demo(demo_env(tmp_path, ZINCIR_RESUME="1"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming run" in resumed.stdout
    check_completed(tmp_path)
    tokens = rows(db, "SELECT lease_token FROM agent_runs")
    assert tokens == [(2,)], "resume must fence the dead owner with a new token"

    snapshot = rows(db, "SELECT run_id, seq, type, payload FROM events ORDER BY run_id, seq")
    again = run_demo(demo_env(tmp_path, ZINCIR_RESUME="1"))
    assert again.returncode == 0, again.stderr
    assert "nothing to resume" in again.stdout
    assert rows(db, "SELECT run_id, seq, type, payload FROM events ORDER BY run_id, seq") == (
        snapshot
    )
    check_completed(tmp_path)


def test_resume_with_nothing_creates_nothing(tmp_path: Path) -> None:
    result = run_demo(demo_env(tmp_path, ZINCIR_RESUME="1"))
    assert result.returncode == 0, result.stderr
    assert "nothing to resume" in result.stdout
    assert rows(tmp_path / "agent.db", "SELECT COUNT(*) FROM agent_runs") == [(0,)]
