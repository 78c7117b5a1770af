"""open_store(single_process=True): the file locked for one store, every read on its writer's
connection, the same data once it is closed or its process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.reference import build, lines
from tests.conftest import REPO
from tests.helpers import rows
from zincir import InvalidInput, StoreUnavailable, WorkflowContext

ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


async def test_a_single_process_store_writes_and_reads_with_no_shared_memory_file(
    db_path: Path,
) -> None:
    async with zincir.open_store(db_path, single_process=True) as store:
        wf = await WorkflowContext.open(store, "alone")
        assert await wf.step("one", lambda: {"n": 1}) == {"n": 1}
        assert await wf.step("two", lambda: {"n": 2}) == {"n": 2}
        assert (await store.get_run(wf.run_id))["status"] == "running"
        assert [e.type for e in await store.list_events(wf.run_id)].count("step_completed") == 2
        assert not os.path.exists(f"{db_path}-shm")  # the WAL index lives in this process
        await wf.complete({"done": True})
    assert rows(db_path, "SELECT status FROM agent_runs") == [("completed",)]


async def test_no_other_store_opens_the_file_until_it_is_closed(db_path: Path) -> None:
    async with zincir.open_store(db_path, single_process=True) as store:
        wf = await WorkflowContext.open(store, "alone")
        await wf.step("one", lambda: 1)
        with pytest.raises(StoreUnavailable, match="locked"):
            zincir.open_store(db_path, busy_timeout=0.2)
        await wf.complete(None)
    async with zincir.open_store(db_path) as shared:
        assert (await shared.get_run(wf.run_id))["status"] == "completed"


def test_a_killed_single_process_store_leaves_every_committed_step(db_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        import zincir
        from zincir import WorkflowContext

        async def main():
            store = zincir.open_store({str(db_path)!r}, single_process=True)
            wf = await WorkflowContext.open(store, "killed-1")
            for i in range(20):
                await wf.step(f"s{{i}}", lambda i=i: i)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    steps = rows(db_path, "SELECT COUNT(*) FROM events WHERE type = 'step_completed'")
    assert steps == [(20,)]
    seqs = [seq for (seq,) in rows(db_path, "SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize("value", [1, "yes", None])
def test_single_process_must_be_a_bool(db_path: Path, value: object) -> None:
    with pytest.raises(InvalidInput, match="single_process"):
        zincir.open_store(db_path, single_process=value)  # type: ignore[arg-type]
    assert not db_path.exists()


def test_a_postgresql_store_cannot_be_single_process() -> None:
    with pytest.raises(InvalidInput, match="single_process"):
        zincir.open_store("postgresql://localhost/zincir", single_process=True)


async def test_a_durable_agent_runs_and_replays_on_a_single_process_store(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    async with zincir.open_store(db_path, single_process=True) as store:
        durable = Durable(str(db_path), store)
        agent = build(log)
        first = await agent.run("Use both tools.", durable=durable.binding(agent))
        again = await build(log).run("Use both tools.", durable=durable.binding(build(log)))
        assert again == first and first.output == "done: first=1 + second=2"
        assert len(lines(log)) == 5  # each model request and tool call ran once
        events = await store.list_events("run-1")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert (await store.get_run("run-1"))["status"] == "completed"


@pytest.mark.parametrize(
    "option", [{"synchronous": "normal"}, {"busy_timeout": 5}, {"busy_timeout": timedelta(0)}]
)
def test_a_postgresql_store_refuses_sqlite_settings(option: dict[str, object]) -> None:
    """A SQLite-only setting on a PostgreSQL URL is refused, not silently dropped."""
    with pytest.raises(InvalidInput, match=next(iter(option))):
        zincir.open_store("postgresql://localhost/zincir", **option)  # type: ignore[arg-type]
