"""A deploy simulated with real processes: a run started on v1 is SIGKILLed mid-way and
resumed on a v2 that changed the code. An external ledger file records every effect, so
"nothing ran" is checked outside the database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import BOTH_BACKENDS, backend_target, select

pytestmark = pytest.mark.crash

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
V1_RESULTS = ["FETCH", "PRICE", "NOTIFY", "ARCHIVE"]


@pytest.fixture(params=BOTH_BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the test's processes share: a SQLite file or a PostgreSQL schema."""
    return backend_target(request, tmp_path)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


def effects(ledger: Path) -> Counter[str]:
    return Counter(ledger.read_text().splitlines() if ledger.exists() else [])


def kill_at_hold(script: str, *args: str) -> None:
    """Start ``script`` with ``args``, wait for its "holding" report, SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / script), *args],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        for line in child.stdout:
            if line.startswith("holding"):
                break
        else:
            raise AssertionError(f"{script} exited before holding: {child.stderr.read()}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL


def run(script: str, *args: str, status: int = 0) -> dict[str, object]:
    """Run ``script`` to its end; its reports by first word (JSON where they hold it)."""
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        env=ENV,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == status, done.stdout + done.stderr
    reports: dict[str, object] = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        try:
            reports[word] = json.loads(rest)
        except json.JSONDecodeError:
            reports[word] = rest
    return reports


def workflow(db: str, run_id: str, version: str, ledger: Path, *rest: str) -> list[str]:
    return [db, run_id, version, str(ledger), *rest]


def killed_after(db: str, ledger: Path, steps: int, run_id: str = "order-1") -> None:
    """v1 runs ``steps`` of its four steps and is killed."""
    kill_at_hold("workflow_versions.py", *workflow(db, run_id, "v1", ledger, f"hold:{steps}"))
    plan = ["fetch", "price", "notify", "archive"][:steps]
    assert effects(ledger) == Counter(f"{run_id} {name}" for name in plan)


def test_a_renamed_step_diverges_before_any_effect_and_v1_finishes_the_run(
    db: str, ledger: Path
) -> None:
    killed_after(db, ledger, 2)
    reports = run("workflow_versions.py", *workflow(db, "order-1", "rename", ledger), status=3)
    assert reports["divergence"] == [1, "step 'price'", "step 'quote'"]
    assert effects(ledger) == Counter({"order-1 fetch": 1, "order-1 price": 1})
    assert select(db, "SELECT name FROM steps ORDER BY name") == [("fetch",), ("price",)]
    assert select(db, "SELECT status FROM agent_runs") == [("running",)]
    # The run waits for code that has its steps: v1 finishes it, each effect once.
    assert run("workflow_versions.py", *workflow(db, "order-1", "v1", ledger))["completed"] == (
        V1_RESULTS
    )
    assert effects(ledger) == Counter(
        f"order-1 {name}" for name in ("fetch", "price", "notify", "archive")
    )


def test_a_step_added_in_the_middle_diverges_before_any_effect(db: str, ledger: Path) -> None:
    killed_after(db, ledger, 2)
    reports = run("workflow_versions.py", *workflow(db, "order-1", "insert", ledger), status=3)
    assert reports["divergence"] == [1, "step 'price'", "step 'audit'"]
    assert effects(ledger) == Counter({"order-1 fetch": 1, "order-1 price": 1})
    assert select(db, "SELECT name FROM steps ORDER BY name") == [("fetch",), ("price",)]


def test_reordered_recorded_steps_replay_without_running_again(db: str, ledger: Path) -> None:
    killed_after(db, ledger, 2)
    reports = run("workflow_versions.py", *workflow(db, "order-1", "reorder", ledger))
    assert reports["completed"] == ["PRICE", "FETCH", "NOTIFY", "ARCHIVE"]
    assert reports["unreplayed"] == []
    assert effects(ledger) == Counter(
        f"order-1 {name}" for name in ("fetch", "price", "notify", "archive")
    )


def test_a_removed_step_is_reported_not_run_and_the_run_completes(db: str, ledger: Path) -> None:
    killed_after(db, ledger, 4)  # every step recorded, killed before complete()
    reports = run("workflow_versions.py", *workflow(db, "order-1", "remove", ledger))
    assert reports["completed"] == ["FETCH", "NOTIFY", "ARCHIVE"]
    assert reports["unreplayed"] == ["step 'price'"]
    assert effects(ledger) == Counter(
        f"order-1 {name}" for name in ("fetch", "price", "notify", "archive")
    )


def test_a_removed_step_followed_by_new_work_diverges_like_a_rename(db: str, ledger: Path) -> None:
    """Asking for notify (never recorded) while price (recorded) was skipped cannot be told
    from renaming price to notify: refused, nothing runs; patched() is the way to drop it."""
    killed_after(db, ledger, 2)
    reports = run("workflow_versions.py", *workflow(db, "order-1", "remove", ledger), status=3)
    assert reports["divergence"] == [1, "step 'price'", "step 'notify'"]
    assert effects(ledger) == Counter({"order-1 fetch": 1, "order-1 price": 1})


def test_patched_keeps_old_runs_on_the_old_path_and_new_runs_on_the_new(
    db: str, ledger: Path
) -> None:
    killed_after(db, ledger, 2, "old")
    # The old run passed the patch point without the marker: it replays price, the old path,
    # and a second kill on v2 changes nothing.
    kill_at_hold("workflow_versions.py", *workflow(db, "old", "patched", ledger, "hold:3"))
    reports = run("workflow_versions.py", *workflow(db, "old", "patched", ledger))
    assert reports["completed"] == V1_RESULTS
    # A new run takes the new path, and keeps it across a kill (its marker is recorded).
    kill_at_hold("workflow_versions.py", *workflow(db, "new", "patched", ledger, "hold:2"))
    reports = run("workflow_versions.py", *workflow(db, "new", "patched", ledger))
    assert reports["completed"] == ["FETCH", "QUOTE", "NOTIFY", "ARCHIVE"]
    assert effects(ledger) == Counter(
        [f"old {name}" for name in ("fetch", "price", "notify", "archive")]
        + [f"new {name}" for name in ("fetch", "quote", "notify", "archive")]
    )
    markers = select(
        db, "SELECT run_id, payload FROM events WHERE type = 'patch_marker' ORDER BY run_id"
    )
    assert [(run_id, json.loads(payload)) for run_id, payload in markers] == [
        ("new", {"id": "new-path"})
    ]


def agent(db: str, version: str, ledger: Path, *rest: str) -> list[str]:
    return [db, "agent-1", version, str(ledger), *rest]


def test_an_agent_given_another_tool_drifts_at_its_first_request_before_any_tool_runs(
    db: str, ledger: Path
) -> None:
    """A tool added to the agent changes the model request (its tool list): the replay of
    request #0 raises InputDrift before anything runs, the same as a VersionDivergence."""
    kill_at_hold("agent_versions.py", *agent(db, "v1", ledger, "hold"))
    assert effects(ledger) == Counter({"tool first": 1})
    assert "drift" in run("agent_versions.py", *agent(db, "add-tool", ledger), status=4)
    assert effects(ledger) == Counter({"tool first": 1})
    assert run("agent_versions.py", *agent(db, "v1", ledger))["output"] == "done"
    assert effects(ledger) == Counter({"tool first": 1, "tool second": 1})


def test_an_agent_whose_operations_moved_diverges_before_any_tool_runs(
    db: str, ledger: Path
) -> None:
    kill_at_hold("agent_versions.py", *agent(db, "v1", ledger, "hold"))
    reports = run("agent_versions.py", *agent(db, "namespace", ledger), status=3)
    assert reports["divergence"] == [
        0,
        "operation model.request #0",
        "operation support.model.request #0",
    ]
    assert effects(ledger) == Counter({"tool first": 1})
    assert select(db, "SELECT step_id FROM operations WHERE step_id LIKE 'support.%'") == []
    assert run("agent_versions.py", *agent(db, "v1", ledger))["output"] == "done"
    assert effects(ledger) == Counter({"tool first": 1, "tool second": 1})
