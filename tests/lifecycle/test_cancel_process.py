"""A run cancelled while another process executes it: that process gets RunCancelled at its
next write and exits, and nothing of it is stored after the cancellation."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import zincir
from tests.helpers import select
from zincir import cancel_run

STEPPER = Path(__file__).with_name("stepper.py")


def _ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_the_running_process_stops_at_its_next_write(
    store_target: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    process = subprocess.Popen(
        [sys.executable, str(STEPPER), store_target, "busy", str(ledger)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while len(_ledger(ledger)) < 3:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the stepper never started"
            time.sleep(0.02)
        store = zincir.open_store(store_target)
        try:
            assert await cancel_run(store, "busy", reason="test") == ["busy"]
        finally:
            await store.close()
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0
    assert "RunCancelled" in stderr and "busy" in stderr

    events = select(
        store_target, "SELECT seq, type FROM events WHERE run_id = ? ORDER BY seq", ("busy",)
    )
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert events[-1][1] == "state_transition"  # nothing was appended after the cancellation
    stored = [
        name
        for (name,) in select(
            store_target,
            "SELECT name FROM steps WHERE run_id = ? AND status = 'completed'",
            ("busy",),
        )
    ]
    ran = _ledger(ledger)
    assert set(stored) <= set(ran)
    assert len(ran) - len(stored) <= 1  # at most the step whose result the cancel refused
    status = select(store_target, "SELECT status FROM agent_runs WHERE id = ?", ("busy",))
    assert status == [("cancelled",)]
