"""ZincirDurability(restart_store=...): a worker restarted after a SIGKILL mid-stream does not
deliver again the events its predecessor's handler committed (a real FileRestartStore)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

import zincir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers import rows  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402
from zincir.restart import FileRestartStore  # noqa: E402

WORKER = Path(__file__).with_name("stream_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


@pytest.mark.crash
def test_a_restarted_worker_skips_the_events_already_delivered(tmp_path: Path) -> None:
    db, log = tmp_path / "agent.db", tmp_path / "events.log"
    argv = [sys.executable, str(WORKER), str(db), str(tmp_path / "checkpoints"), str(log)]
    killed = subprocess.run([*argv, "kill"], env=ENV, capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = log.read_text("utf-8").splitlines()
    assert before == ["start 'Refunded '", "final_result", "delta '4200 '"]
    rerun = subprocess.run([*argv, "run"], env=ENV, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout == "output: Refunded 4200 cents for A-17.\n"
    # the model stream ran again, but only the event in flight at the kill is delivered twice
    assert log.read_text("utf-8").splitlines()[len(before) :] == [
        "delta '4200 '",
        "delta 'cents '",
        "delta 'for '",
        "delta 'A-17.'",
        "part_end",
    ]
    assert rows(db, "SELECT step_id, sequence FROM operations") == [
        ("pydantic_ai.teller.model.stream", 0)
    ]


async def test_a_restart_store_needs_an_event_handler(db_path: Path, tmp_path: Path) -> None:
    async with zincir.open_store(db_path) as store:
        with pytest.raises(zincir.InvalidInput, match="event_stream_handler"):
            ZincirDurability(store, restart_store=FileRestartStore(tmp_path / "checkpoints"))
        with pytest.raises(zincir.InvalidInput, match="restart store"):
            ZincirDurability(store, restart_store=object(), event_stream_handler=print)  # type: ignore[arg-type]
