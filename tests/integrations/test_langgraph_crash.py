"""LangGraph on ZincirSaver across SIGKILL, an interrupt answered by a third process, and
eight processes checkpointing into one SQLite file at once (each also on a PostgreSQL schema
when $ZINCIR_TEST_BACKENDS names postgres)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="LangGraph is in the dev extra")

from tests.conftest import BACKENDS, REPO  # noqa: E402
from tests.integrations.langgraph_worker import (  # noqa: E402
    ITEMS,
    RING,
    Tool,
    attempt_lines,
    config,
    ledger_lines,
    order_graph,
    ring_graph,
)
from zincir.integrations.langgraph import ZincirSaver  # noqa: E402

pytestmark = pytest.mark.crash

WORKER = Path(__file__).with_name("langgraph_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
THREAD = "order-1"
QUESTION = {"question": "close the order?", "charged": ITEMS}
FINAL = {
    "items": ITEMS,
    "charged": ITEMS,
    "shipped": True,
    "emailed": True,
    "decision": "refund",
    "status": "closed",
}
EFFECTS = [
    *(f"charge {item}" for item in ITEMS),
    "ship apple+pear+plum+fig",
    "email 4 items",
    "close refund",
]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(*args: str) -> dict[str, Any]:
    """Run the worker to its end in a new process; return its JSON line."""
    done = subprocess.run(
        [sys.executable, str(WORKER), *args],
        env=ENV,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    output: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return output


def until_inside(process: subprocess.Popen[str]) -> str:
    """The task id the worker reports it is blocked in."""
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()
    assert line.startswith("inside "), process.stderr.read()
    return line.split()[1]


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    for stream in (process.stdout, process.stderr):
        assert stream is not None
        stream.close()


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """This test's database: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "graph.db")


@pytest.fixture
def saver(db: str) -> Iterator[ZincirSaver]:
    """A ZincirSaver of this test's database, open in the test process."""
    with ZincirSaver.from_conn_string(db) as opened:
        yield opened


def eventually(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def assert_ledger_once(folder: Path, expected: list[str]) -> None:
    """No task's effect and no effect at all was recorded twice; exactly ``expected``."""
    lines = ledger_lines(folder)
    keys = [key for key, _ in lines]
    effects = [effect for _, effect in lines]
    assert len(set(keys)) == len(keys), lines
    assert sorted(effects) == sorted(expected), lines


@pytest.mark.parametrize(
    ("block_in", "before_kill", "pending"),
    [
        ("charge plum", EFFECTS[:3], ("charge",)),
        ("email", EFFECTS[:6], ("email",)),
    ],
    ids=["sequential-node", "beside-a-finished-parallel-node"],
)
def test_killed_inside_a_node_resumes_once_then_answers_the_interrupt(
    tmp_path: Path,
    db: str,
    saver: ZincirSaver,
    block_in: str,
    before_kill: list[str],
    pending: tuple[str, ...],
) -> None:
    folder = str(tmp_path)
    graph = order_graph(Tool(tmp_path, None)).compile(checkpointer=saver)
    worker = start("order", db, folder, THREAD, "--block-in", block_in)
    try:
        blocked = until_inside(worker)
        if block_in == "email":
            # the parallel node finished: its writes must be durable before the kill
            eventually(lambda: "ship" in dict(attempt_lines(tmp_path)).values(), "ship ran")
            ship = next(task for task, node in attempt_lines(tmp_path) if node == "ship")

            def ship_written() -> bool:
                found = saver.get_tuple(config(THREAD))
                return found is not None and ship in {w[0] for w in found.pending_writes or []}

            eventually(ship_written, "ship's writes never reached the saver")
        assert_ledger_once(tmp_path, before_kill)
        assert graph.get_state(config(THREAD)).next == pending
    finally:
        kill(worker)

    resumed = finish("resume", db, folder, THREAD)
    assert resumed["interrupts"] == [QUESTION]
    assert resumed["next"] == ["approve"]
    assert_ledger_once(tmp_path, EFFECTS[:6])

    answered = finish("answer", db, folder, THREAD, "refund")
    assert answered == {"values": FINAL, "interrupts": [], "next": []}
    assert_ledger_once(tmp_path, EFFECTS)

    # only the killed task and the interrupted one ran twice, each under its own task id
    attempts = attempt_lines(tmp_path)
    approve = next(task for task, node in attempts if node == "approve")
    again = {task: count for task, count in Counter(t for t, _ in attempts).items() if count > 1}
    assert again == {blocked: 2, approve: 2}
    assert Counter(node for _, node in dict(attempts).items()) == {
        "plan": 1,
        "charge": 4,
        "ship": 1,
        "email": 1,
        "approve": 1,
        "finish": 1,
    }

    state = graph.get_state(config(THREAD))
    assert state.values == FINAL and state.next == ()
    steps = [snapshot.metadata["step"] for snapshot in graph.get_state_history(config(THREAD))]
    assert steps == list(range(8, -2, -1))  # each super-step checkpointed once


PROCESSES = 8
STEPS = 60


def test_eight_processes_checkpoint_threads_into_one_database(tmp_path: Path, db: str) -> None:
    go = tmp_path / "go"
    with ZincirSaver.from_conn_string(db) as saver:
        assert saver.get_tuple(config("t0")) is None  # the schema exists before the race
    workers = [
        start(
            "steps",
            db,
            str(tmp_path),
            f"t{i}",
            str(STEPS),
            "--go",
            str(go),
            *(["--asyncio"] if i % 2 else []),
        )
        for i in range(PROCESSES)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stderr is not None
        assert worker.stdout.readline() == "ready\n", worker.stderr.read()
    go.touch()
    for i, worker in enumerate(workers):
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, f"t{i}: {err}"
        assert json.loads(out.splitlines()[-1]) == {"n": STEPS, "last": RING[(STEPS - 1) % 3]}
        assert "locked" not in err.lower() and "busy" not in err.lower(), err

    with ZincirSaver.from_conn_string(db) as saver:
        graph = ring_graph(STEPS).compile(checkpointer=saver)
        for i in range(PROCESSES):
            thread = config(f"t{i}")
            state = graph.get_state(thread)
            assert state.values == {"n": STEPS, "last": RING[(STEPS - 1) % 3]}
            assert state.next == () and state.metadata is not None
            assert state.metadata["step"] == STEPS
            history = list(saver.list(thread))
            assert [c.metadata["step"] for c in history] == list(range(STEPS, -2, -1))
            for child, parent in zip(history, history[1:], strict=False):
                assert child.parent_config is not None
                assert (
                    child.parent_config["configurable"]["checkpoint_id"]
                    == parent.config["configurable"]["checkpoint_id"]
                )
