"""A tool that delivers an event and is killed before it returns: the event's record lies
in the log before the tool call's, and the resumed run replays it as the same work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

CHILD = Path(__file__).with_name("event_in_tool_child.py")


def _run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}", **extra}
    return subprocess.run(
        [
            sys.executable,
            str(CHILD),
            str(tmp_path / "run.db"),
            "announce-1",
            str(tmp_path / "events"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_tool_killed_after_delivering_an_event_resumes_and_delivers_it_once(
    tmp_path: Path,
) -> None:
    killed = _run(tmp_path, KILL_IN_TOOL="1")
    assert killed.returncode == -9, killed.stderr
    resumed = _run(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "Oslo: clear."
    assert (tmp_path / "events").read_text().splitlines() == ['"Oslo"']  # delivered once
