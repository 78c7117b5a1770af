"""examples/durable_support_agent.py: killed, rerun, paused for approval, approved, completed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import rows, seqs


def test_the_support_agent_survives_a_kill_and_an_approval(tmp_path: Path) -> None:
    db, ledger = tmp_path / "support.db", tmp_path / "ledger.txt"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "durable_support_agent.py"),
            "--db",
            str(db),
            "--ledger",
            str(ledger),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL" in done.stdout
    assert "paused: refund({'order_id': 'A-17', 'amount_cents': 4200})" in done.stdout
    assert "output: Refunded 4200 cents for A-17." in done.stdout
    assert ledger.read_text("utf-8").splitlines() == [
        "model request 0",
        "tool lookup_order A-17",
        "model request 1",  # in flight when the first process was killed
        "model request 1",
        "tool refund A-17 4200",
        "model request 2",
    ]
    assert rows(db, "SELECT status, lease_owner FROM agent_runs") == [("completed", None)]
    events = seqs(db, "support-A17")
    assert events == list(range(1, len(events) + 1))
    assert [
        t
        for (t,) in rows(
            db, "SELECT type FROM events WHERE type IN ('llm_call', 'tool_result') ORDER BY seq"
        )
    ] == ["llm_call", "tool_result", "llm_call", "tool_result", "llm_call"]
