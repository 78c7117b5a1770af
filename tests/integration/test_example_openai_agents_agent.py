"""examples/openai_agents_agent.py: SIGKILLed inside a tool, resumed by its run id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import rows

pytest.importorskip("agents", reason="openai-agents is in the dev extra")

EXAMPLE = REPO / "examples" / "openai_agents_agent.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


def example(db: Path, ledger: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(EXAMPLE), "--db", str(db), "--ledger", str(ledger), *flags]
    return subprocess.run(argv, env=ENV, text=True, capture_output=True, timeout=60, check=False)


@pytest.mark.crash
def test_the_openai_agents_example_resumes_after_a_sigkill(tmp_path: Path) -> None:
    calm = example(tmp_path / "calm.db", tmp_path / "calm.txt")  # never interrupted
    assert calm.returncode == 0, calm.stderr
    db, ledger = tmp_path / "agent.db", tmp_path / "ledger.txt"
    killed = example(db, ledger, "--crash")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert rows(db, "SELECT status FROM agent_runs") == [("running",)]
    resumed = example(db, ledger)  # at once: the lease's owner died on this machine
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == calm.stdout
    assert resumed.stdout.splitlines() == [
        "output: Refunded 4200 cents for A-17. (answered by billing)",
        "run refund-A17: completed",
    ]
    assert ledger.read_text("utf-8").splitlines() == [
        "model request 0",
        "model request 1",
        "tool lookup A-17",
        "model request 2",
        "tool refund A-17 started",  # cut short by the kill
        "tool refund A-17 started",
        "tool refund A-17 done",
        "model request 3",
    ]
    again = example(db, ledger)  # a finished run replays: nothing runs again
    assert again.stdout == calm.stdout
    assert len(ledger.read_text("utf-8").splitlines()) == 8


def test_the_openai_agents_example_story_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=ENV,
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1] first process: killed by SIGKILL" in done.stdout
    assert "    output: Refunded 4200 cents for A-17. (answered by billing)" in done.stdout
    assert done.stdout.count("tool refund A-17 done") == 1
