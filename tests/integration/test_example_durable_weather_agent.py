"""examples/durable_weather_agent.py against a scripted OpenAI-compatible server on loopback:
SIGKILLed inside its slow tool, then started again at once (the same run id, or --resume)
or resumed by ``zincir worker``; it finishes well within the lease TTL and no finished
model request is asked again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.openai_server import API_KEY, ChatServer, Reply, chat_server, completion, tool_call
from tests.conftest import REPO
from tests.helpers import rows

pytestmark = pytest.mark.crash

EXAMPLE = REPO / "examples" / "durable_weather_agent.py"
LEASE_TTL = 30.0  # the Runner's default, which the example keeps
REPORT = "Oslo: overcast, 7 C."


@pytest.fixture
def server() -> Iterator[ChatServer]:
    """The model: ask for the forecast, then for the report to be saved, then answer."""
    with chat_server() as served:
        served.script(
            Reply(completion(None, [tool_call("c1", "get_forecast", '{"city": "Oslo"}')])),
            Reply(
                completion(
                    None,
                    [
                        tool_call(
                            "c2", "save_report", json.dumps({"city": "Oslo", "report": REPORT})
                        )
                    ],
                )
            ),
            Reply(completion(REPORT)),
        )
        yield served


def _env(server: ChatServer, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_MODEL": "gpt-test",
        "WEATHER_SERVICE_SECONDS": "1",
        "WEATHER_REPORTS": str(tmp_path / "reports.txt"),
    }


def _kill_inside_the_forecast(server: ChatServer, tmp_path: Path, db: Path) -> tuple[str, float]:
    """Start the example on Oslo, SIGKILL it inside get_forecast; (its run id, kill time)."""
    first = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "Oslo", "--db", str(db)],
        env=_env(server, tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        header = first.stdout.readline()
        assert header.startswith("run "), header + (first.stderr.read() if first.stderr else "")
        run_id = header.split()[1]
        line = first.stdout.readline()
        assert line == "  looking up the forecast for Oslo…\n", line + first.communicate()[1]
        killed_at = time.monotonic()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.returncode is None:
            first.kill()
        first.communicate()
    assert len(server.received) == 1  # the first model request finished before the kill
    assert rows(db, "SELECT status FROM agent_runs WHERE id = ?", (run_id,)) == [("running",)]
    return run_id, killed_at


def _finished_once(server: ChatServer, db: Path, run_id: str, tmp_path: Path) -> None:
    """The run completed with the report saved once and each model request asked once."""
    assert len(server.received) == 3, [body["messages"][-1] for body in server.bodies]
    assert rows(db, "SELECT status FROM agent_runs WHERE id = ?", (run_id,)) == [("completed",)]
    assert (tmp_path / "reports.txt").read_text("utf-8") == f"Oslo: {REPORT}\n"
    stored = rows(
        db,
        "SELECT COUNT(*) FROM operations WHERE run_id = ? AND step_id = 'model.request' "
        "AND outcome = 'success'",
        (run_id,),
    )
    assert stored == [(3,)]


@pytest.mark.parametrize("again", ["--run-id", "--resume"])
def test_killed_inside_a_tool_and_started_again_at_once(
    server: ChatServer, tmp_path: Path, again: str
) -> None:
    db = tmp_path / "weather.db"
    run_id, killed_at = _kill_inside_the_forecast(server, tmp_path, db)
    city = [] if again == "--resume" else ["Oslo"]

    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *city, again, run_id, "--db", str(db)],
        env=_env(server, tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    took = time.monotonic() - killed_at
    assert done.returncode == 0, done.stdout + done.stderr
    assert took < LEASE_TTL / 2, f"the restart took {took:.1f} s: it waited for the lease"
    assert done.stdout.splitlines()[1:] == [
        "  looking up the forecast for Oslo…",  # cut off by the kill: runs again
        f"  saved the report for Oslo to {tmp_path / 'reports.txt'}",
        REPORT,
    ]
    _finished_once(server, db, run_id, tmp_path)


def test_a_killed_run_is_resumed_by_zincir_worker(server: ChatServer, tmp_path: Path) -> None:
    db = tmp_path / "weather.db"
    run_id, killed_at = _kill_inside_the_forecast(server, tmp_path, db)
    zincir = Path(sys.executable).with_name("zincir")
    worker = subprocess.Popen(  # as the docstring says: from the repository's root
        [str(zincir), "worker", "--agent", "examples.durable_weather_agent:agent", "--db", str(db)],
        env=_env(server, tmp_path),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while rows(db, "SELECT status FROM agent_runs WHERE id = ?", (run_id,)) != [("completed",)]:
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the worker did not finish the run"
            time.sleep(0.05)
        took = time.monotonic() - killed_at
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.returncode is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, out + err  # SIGTERM stops it cleanly
    assert took < LEASE_TTL / 2, f"the worker took {took:.1f} s: it waited for the lease"
    _finished_once(server, db, run_id, tmp_path)
