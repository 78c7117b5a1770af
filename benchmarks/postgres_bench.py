"""PostgreSQL figures for benchmarks/run.py, on a throwaway server started for the run.

- ``pg_raw_us``: the physical limit, one ``INSERT`` + ``COMMIT`` per step from psycopg on the
  same server (``synchronous_commit`` on).
- ``pg_step_us`` / ``pg_step_async_us``: ``WorkflowContext.step`` on a ``PostgresStore``
  with ``synchronous_commit`` on, and off (``?options=-csynchronous_commit=off``).
- ``pg_4proc_steps_per_s`` beside ``sqlite_4proc_steps_per_s``: four processes, each
  stepping through its own run, on one PostgreSQL schema and on one SQLite file.
- With the peers venv: ``dbos_pg_step_us``, DBOS's steps on a database of the same server.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.postgres_server import PostgresServer  # noqa: E402

STEPS_CHILD = HERE / "steps_child.py"


def raw_us(url: str, n: int) -> float:
    """One autocommitted INSERT per step: a durable commit round trip."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS raw_steps (k bigint PRIMARY KEY, v text)")
        conn.execute("TRUNCATE raw_steps")
        payload = json.dumps({"payload": "x" * 100})
        for i in range(50):
            conn.execute("INSERT INTO raw_steps VALUES (%s, %s)", (-1 - i, payload))
        started = time.perf_counter()
        for i in range(n):
            conn.execute("INSERT INTO raw_steps VALUES (%s, %s)", (i, payload))
        return (time.perf_counter() - started) / n * 1e6


def processes_steps_per_s(target: str, processes: int, steps: int) -> float:
    """``processes`` children, each ``steps`` steps of its own run, started together: all
    their steps over the span from the first one's start to the last one's end."""
    start_at = str(time.time() + 5)  # every child opens its store first, then all step at once
    children = [
        subprocess.Popen(
            [sys.executable, str(STEPS_CHILD), target, f"proc-{i}", str(steps), start_at],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    spans = []
    for child in children:
        out, _ = child.communicate(timeout=600)
        if child.returncode != 0:
            raise RuntimeError(f"{STEPS_CHILD.name} failed with {child.returncode}")
        spans.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(span["end"] for span in spans) - min(span["start"] for span in spans)
    return processes * steps / elapsed


def with_option(url: str, option: str) -> str:
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={quote(option)}"


def measure(
    bench: Any,
    step_us: Any,
    run_async: Any,
    peer_us: Any,
    peers_python: str | None,
) -> tuple[dict[str, float], dict[str, float]]:
    """The PostgreSQL figures and their ratios; ``step_us``/``peer_us`` are run.py's."""
    figures: dict[str, float] = {}
    ratios: dict[str, float] = {}
    n = bench.n(1000, 300)
    server = PostgresServer().start()
    try:
        raws, fulls, asyncs = [], [], []
        for round_ in range(bench.repeat):
            raws.append(raw_us(server.url, n))
            full_url = server.new_schema_url(f"bench_full_{round_}")
            fulls.append(run_async(step_us(full_url, "full", n)))
            async_url = with_option(
                server.new_schema_url(f"bench_async_{round_}"), "-csynchronous_commit=off"
            )
            asyncs.append(run_async(step_us(async_url, "full", n)))
        figures["pg_raw_us"] = statistics.median(raws)
        figures["pg_step_us"] = statistics.median(fulls)
        figures["pg_step_async_us"] = statistics.median(asyncs)
        ratios["pg_step_over_pg_raw"] = statistics.median(
            [f / r for f, r in zip(fulls, raws, strict=True)]
        )
        steps = bench.n(500, 150)
        figures["pg_4proc_steps_per_s"] = processes_steps_per_s(
            server.new_schema_url("bench_4proc"), 4, steps
        )
        figures["sqlite_4proc_steps_per_s"] = processes_steps_per_s(
            bench.db("sqlite-4proc"), 4, steps
        )
        ratios["pg_4proc_over_pg_step_seq"] = figures["pg_4proc_steps_per_s"] / (
            1e6 / figures["pg_step_us"]
        )
        if peers_python is not None:
            with server.admin() as conn:
                conn.execute("DROP DATABASE IF EXISTS dbos_bench")
                conn.execute("CREATE DATABASE dbos_bench")
            dbos_url = server.url.rsplit("/", 1)[0] + "/dbos_bench"
            costs, per_step = [], []
            for round_ in range(bench.repeat if not bench.quick else 1):
                ours = run_async(step_us(server.new_schema_url(f"bench_adj_{round_}"), "full", n))
                cost = peer_us(peers_python, "dbos_pg", dbos_url, n)
                costs.append(cost)
                per_step.append(cost / ours)
            figures["dbos_pg_step_us"] = statistics.median(costs)
            ratios["dbos_pg_over_pg_step"] = statistics.median(per_step)
    finally:
        server.stop()
    return figures, ratios
