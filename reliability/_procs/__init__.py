"""What the reliability scenarios share: child processes, signals, read-only queries, figures.

The scripts beside this module are the child processes the scenarios start
(``python -m reliability._procs.NAME``); each prints one line per fact the parent checks.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw

__all__ = [
    "REPO",
    "Child",
    "percentile",
    "query",
    "say",
    "wait_stopped",
    "write_lock_held",
]

REPO = Path(__file__).resolve().parents[2]


def say(line: str) -> None:
    """Print one line for the parent at once (children talk through stdout)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Child:
    """One child process of a scenario, started from this package, read line by line."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self.lines: list[str] = []

    @classmethod
    async def start(cls, script: str, *args: str, stdin: bool = False) -> Child:
        """Run ``python -m reliability._procs.<script> args…`` with stdout (and, with
        ``stdin``, its input) piped to us."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"reliability._procs.{script}",
            *args,
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process, script)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def expect(self, prefix: str, timeout: float = 30.0) -> str:
        """The next line starting with ``prefix`` (earlier lines are kept in ``lines``)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            raw = await asyncio.wait_for(self.process.stdout.readline(), max(left, 0.001))
            if not raw:
                raise RuntimeError(f"{self.name} exited before {prefix!r}: {await self.stderr()}")
            line = raw.decode().rstrip("\n")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    async def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        await self.process.stdin.drain()

    async def finish(self, timeout: float) -> int | None:
        """Read the rest of stdout and wait for the exit code; None if it outlived ``timeout``
        (the child is then killed)."""
        assert self.process.stdout is not None
        try:
            rest = await asyncio.wait_for(self.process.stdout.read(), timeout)
            code = await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            await self.kill()
            return None
        self.lines += rest.decode().splitlines()
        return code

    async def stderr(self) -> str:
        """What the child wrote to stderr (after it exited)."""
        assert self.process.stderr is not None
        await self.process.wait()
        return (await self.process.stderr.read()).decode(errors="replace")

    async def kill(self) -> None:
        """SIGKILL (continuing it first if stopped) and reap it."""
        if self.process.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        await self.process.wait()

    async def close(self) -> None:
        """Make sure the child is gone and its pipes drained."""
        await self.kill()
        if self.process.stdin is not None:
            self.process.stdin.close()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                await stream.read()


def wait_stopped(pid: int, timeout: float = 5.0) -> bool:
    """Wait until ``pid`` is really stopped (state T in /proc): SIGSTOP lands asynchronously."""
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        text = stat.read_text()
        state = text[text.rindex(")") + 2]
        if state in "Tt":
            return True
        time.sleep(0.0002)
    return False


def write_lock_held(db: Path | str) -> bool:
    """True while some connection holds the SQLite file's write lock (a paused writer)."""
    conn = apsw.Connection(str(db))
    try:
        conn.set_busy_timeout(0)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except (apsw.BusyError, apsw.ProtocolError):  # the latter: paused mid WAL-index update
            return True
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


def query(db: Path | str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one SELECT on a read-only connection of its own."""
    conn = apsw.Connection(
        f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        conn.set_busy_timeout(30_000)
        return list(conn.execute(sql, tuple(params)))
    finally:
        conn.close()


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.5 is the median); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]
