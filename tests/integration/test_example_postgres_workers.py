"""examples/postgres_workers.py on the test PostgreSQL server: three workers, one killed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def test_three_workers_share_the_reports_and_survive_a_kill(postgres_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "postgres_workers.py")],
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "ZINCIR_POSTGRES_URL": postgres_url},
        text=True,
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILLed worker-a" in done.stdout
    finished = re.findall(
        r"report-\d\d: completed, \{\"finished_by\":\"(worker-\w)\"\}", done.stdout
    )
    assert len(finished) == 12 and "worker-a" not in set(finished[-1:])
    assert {"worker-b", "worker-c"} & set(finished)
    assert "36 steps ran" in done.stdout
