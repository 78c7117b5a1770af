"""examples/mcp_agent.py: an agent with an MCP server's tools, killed, rerun, completed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import rows

pytest.importorskip("mcp")


def test_the_mcp_agent_survives_a_kill(tmp_path: Path) -> None:
    db, ledger = tmp_path / "weather.db", tmp_path / "ledger.txt"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "mcp_agent.py"),
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
    assert "output: Oslo: sunny, 21 C; Bergen: sunny, 21 C" in done.stdout
    # each tool really ran once, the MCP calls included, though the first process was killed
    assert sorted(ledger.read_text("utf-8").splitlines()) == [
        "mcp forecast Bergen",
        "mcp forecast Oslo",
        "tool note trip",
    ]
    assert rows(db, "SELECT status FROM agent_runs") == [("completed",)]
    assert rows(
        db, "SELECT step_id, sequence FROM operations WHERE kind = 'mcp_request' ORDER BY 1, 2"
    ) == [("mcp.request", 0), ("mcp.request", 1000), ("mcp.toolset.weather", 0)]
