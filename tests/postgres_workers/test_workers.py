"""Several machines on one PostgreSQL, simulated honestly: worker processes over TCP, killed,
stopped, cut off from the server, and the server itself restarted mid-run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import zincir
from tests.conftest import REPO
from tests.postgres_server import PostgresServer
from zincir.store.postgres import split_schema

WORKER = Path(__file__).with_name("worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def create_runs(url: str, count: int, prefix: str = "run") -> list[str]:
    """``count`` runs left unowned (created, then released), so any worker may claim them."""

    async def create() -> list[str]:
        store = zincir.open_store(url)
        try:
            ids = []
            for number in range(count):
                ctx = await zincir.AgentContext.create(
                    store, name="job", run_id=f"{prefix}-{number:03d}"
                )
                await ctx.close()
                ids.append(ctx.run_id)
            return ids
        finally:
            await store.close()

    return asyncio.run(create())


def start_worker(
    url: str, name: str, folder: Path, *extra: str, app: str | None = None
) -> subprocess.Popen[str]:
    target = f"{url}&application_name={app}" if app else url
    return subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            target,
            name,
            str(folder / "effects"),
            str(folder / "acks"),
            *extra,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out


def run_rows(url: str) -> dict[str, zincir.store.RunRecord]:
    async def read() -> dict[str, zincir.store.RunRecord]:
        store = zincir.open_store(url)
        try:
            return {run["id"]: run for run in await store.list_runs(limit=10_000)}
        finally:
            await store.close()

    return asyncio.run(read())


def completed_steps(server: PostgresServer, url: str) -> set[tuple[str, str]]:
    schema = split_schema(url)[1]
    with server.admin() as conn:
        found = conn.execute(
            f"SELECT run_id, name FROM {schema}.steps WHERE status = 'completed'"
        ).fetchall()
    return {(str(run_id), str(name)) for run_id, name in found}


def test_eight_workers_claim_fifty_runs_each_exactly_once(
    postgres_url: str, tmp_path: Path
) -> None:
    ids = create_runs(postgres_url, 400)
    workers = [
        start_worker(postgres_url, f"w{n}", tmp_path, "--steps", "1", "--concurrency", "8")
        for n in range(8)
    ]
    outputs = [finish(proc) for proc in workers]
    claims = [
        line.split() for out in outputs for line in out.splitlines() if line.startswith("claim")
    ]
    assert sorted(run_id for _, run_id, _, _ in claims) == ids  # each run claimed once
    assert len({name for *_, name in claims}) > 1  # the work was shared
    runs = run_rows(postgres_url)
    assert all(run["status"] == "completed" and run["attempts"] == 1 for run in runs.values())
    effects = Counter((run_id, step) for _, run_id, step, _ in lines(tmp_path / "effects"))
    assert set(effects.values()) == {1} and len(effects) == 400


def test_a_killed_worker_is_taken_over_after_its_lease_expires(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    ids = create_runs(postgres_url, 4)
    slow = ("--steps", "8", "--delay", "0.1", "--lease", "1")
    first = start_worker(postgres_url, "A", tmp_path, *slow)
    wait_for(lambda: len(lines(tmp_path / "acks")) >= 6, 30, "A to acknowledge some steps")
    first.send_signal(signal.SIGKILL)
    first.communicate()
    acked_by_a = {(run_id, step) for _, run_id, step, _ in lines(tmp_path / "acks")}
    second = start_worker(postgres_url, "B", tmp_path, *slow)
    out = finish(second)
    runs = run_rows(postgres_url)
    assert sorted(runs) == ids and all(run["status"] == "completed" for run in runs.values())
    taken = [line.split()[1] for line in out.splitlines() if line.startswith("claim")]
    assert taken and all(runs[run_id]["lease_token"] >= 2 for run_id in taken)
    effects = Counter((run_id, step) for _, run_id, step, _ in lines(tmp_path / "effects"))
    # Every step A acknowledged ran once in all: B replayed its stored result.
    assert all(effects[key] == 1 for key in acked_by_a)
    # Each run re-ran at most the one step A had in flight.
    again = Counter(run_id for (run_id, _), count in effects.items() if count > 1)
    assert all(count <= 1 for count in again.values())
    assert acked_by_a <= completed_steps(postgres_server, postgres_url)


def test_a_worker_cut_off_from_the_server_is_fenced_once_another_took_over(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    (run_id,) = create_runs(postgres_url, 1)
    slow = ("--steps", "30", "--delay", "0.1", "--lease", "1")
    first = start_worker(postgres_url, "A", tmp_path, *slow, app="worker_a")
    wait_for(lambda: len(lines(tmp_path / "acks")) >= 2, 30, "A to acknowledge two steps")
    first.send_signal(signal.SIGSTOP)  # paused past its lease, like a long GC or a VM freeze
    try:
        assert postgres_server.terminate_backends("worker_a") >= 1
        time.sleep(1.5)  # A's lease expires
        acked_by_a = {step for _, _, step, who in lines(tmp_path / "acks") if who == "A"}
        second = start_worker(postgres_url, "B", tmp_path, "--steps", "30", "--lease", "5")
        finish(second)
    finally:
        first.send_signal(signal.SIGCONT)
    out = finish(first, timeout=60)
    run = run_rows(postgres_url)[run_id]
    assert run["status"] == "completed" and run["result"] == '{"by":"B"}'
    # A's late writes were refused: it acknowledged nothing more after B took the run over,
    # and it stopped with a fencing (or terminal-run) error instead of writing.
    late = {step for _, _, step, who in lines(tmp_path / "acks") if who == "A"} - acked_by_a
    assert late <= {f"s{len(acked_by_a)}"}  # at most the step whose commit was in flight
    assert any(
        name in out for name in ("FencedOut", "RunTerminal", "LeaseLost", "ConnectionLost")
    ), out
    assert len(completed_steps(postgres_server, postgres_url)) == 30


def test_a_server_restart_mid_run_loses_no_acknowledged_write(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    ids = create_runs(postgres_url, 30)
    args = ("--steps", "10", "--delay", "0.01", "--lease", "2", "--concurrency", "5")
    workers = [start_worker(postgres_url, f"w{n}", tmp_path, *args) for n in range(3)]
    wait_for(lambda: len(lines(tmp_path / "acks")) >= 40, 60, "some acknowledged steps")
    postgres_server.restart()
    acked_before = {(run_id, step) for _, run_id, step, _ in lines(tmp_path / "acks")}
    for proc in workers:
        finish(proc, timeout=180)
    runs = run_rows(postgres_url)
    assert sorted(runs) == ids and all(run["status"] == "completed" for run in runs.values())
    stored = completed_steps(postgres_server, postgres_url)
    assert acked_before <= stored
    assert {(run_id, step) for _, run_id, step, _ in lines(tmp_path / "acks")} <= stored
    assert len(stored) == 300
