"""``zincir worker --agent module:attr``: a worker process resumes a killed agent run whose
prompt lives only in the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.agent.reference import lines
from tests.agent.runner_agents import LOG_ENV
from tests.agent.test_runner import start_killed_run
from tests.conftest import REPO
from tests.helpers import select

AGENT = "tests.agent.runner_agents:agent"


def worker_env(log: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env.pop("ZINCIR_DATABASE_PATH", None)
    env[LOG_ENV] = str(log)
    return env


def zincir(*args: str, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zincir", "worker", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=worker_env(log),
        timeout=60,
    )


@pytest.mark.crash
def test_a_worker_resumes_a_killed_run_from_its_stored_prompt(
    store_target: str, tmp_path: Path
) -> None:
    log = tmp_path / "calls.log"
    prompt = f"Weather for the {uuid.uuid4().hex} festival."
    start_killed_run(store_target, log, "killed", prompt)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zincir",
            "worker",
            "--agent",
            AGENT,
            "--db",
            store_target,
            "--poll-interval",
            "0.05",
        ],
        cwd=REPO,
        env=worker_env(log),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        printed: list[str] = []
        deadline = time.monotonic() + 40
        while not any("completed" in line for line in printed):
            assert time.monotonic() < deadline and worker.poll() is None, printed
            printed.append(worker.stdout.readline().strip())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert printed[0] == "[run killed] resumed"
    assert printed[-1].startswith("[run killed] completed: Weather for the")
    assert "stopped" in err
    [(status, result)] = select(store_target, "SELECT status, result FROM agent_runs")
    assert status == "completed" and f"{prompt} -> Oslo clear" in result
    assert lines(log).count("model 0") == 1 and lines(log).count("model 1") == 1


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("tests.agent.runner_agents:not_an_agent", "is a int, not a zincir.agent.Agent"),
        ("tests.agent.runner_agents:nobody", "has no attribute 'nobody'"),
        ("tests.agent.no_such_module:agent", "cannot import 'tests.agent.no_such_module'"),
        ("runner_agents", "expected module:attribute"),
    ],
)
def test_a_bad_agent_target_says_what_is_wrong(target: str, said: str, tmp_path: Path) -> None:
    done = zincir("--agent", target, "--db", str(tmp_path / "x.db"), log=tmp_path / "log")
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_needs_a_handler_or_agents_not_both(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    neither = zincir("--db", db, log=tmp_path / "log")
    assert neither.returncode == 2 and "--agent" in neither.stderr
    both = zincir("tests.agent.runner_agents:agent", "--agent", AGENT, "--db", db, log=tmp_path)
    assert both.returncode == 2 and "TARGET" in both.stderr
    pinned = zincir("--agent", AGENT, "--pin-version", "--db", db, log=tmp_path / "log")
    assert pinned.returncode == 2 and "not to --agent" in pinned.stderr


def test_a_list_of_agents_is_served(tmp_path: Path) -> None:
    env = worker_env(tmp_path / "log")
    worker = subprocess.Popen(
        [sys.executable, "-m", "zincir", "worker", "--agent", "tests.agent.runner_agents:both"]
        + ["--db", str(tmp_path / "x.db")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    first = worker.stderr.readline()
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=30)
    assert "serving agents weather, refunds" in first, first + err
    assert worker.returncode == 0, err
