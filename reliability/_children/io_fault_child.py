"""Runs a workflow against a disk that fails the k-th I/O operation, for each k given.

    python -m reliability._children.io_fault_child BASE WORKDIR KIND MODE SYNCHRONOUS PATH K...

KIND is ``ioerr`` or ``full``, MODE ``once`` or ``persistent``, PATH ``inline`` (the
process's only writer commits on its own thread) or ``writer-thread`` (another connection
holds the write lock for a few milliseconds at each workflow call, so every commit waits
on zincir's writer thread, as with another process writing). For each K: copy the
migrated empty database BASE to ``WORKDIR/K/zincir.db``, arm the fault, then open the store,
run a workflow of a few steps, complete it and close the store, stopping at the first
error. Then the fault clears: the database files are copied to ``WORKDIR/K/crash/`` (what a
process crash at that moment would leave), and the same store object, if it is still open,
resumes the run (recover, replay, complete) and closes. Prints ``start K`` before each trial
and one JSON object after it (see :class:`Trial`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import apsw

import zincir
from reliability._fault_vfs import FaultPlan, FaultVFS
from zincir.testing import FakeClock
from zincir.workflow import WorkflowContext

T = TypeVar("T")

RUN_ID = "io-run"
STEPS = [f"step-{number}" for number in range(1, 5)]
LEASE_TTL = timedelta(seconds=60)
"""Long enough that no heartbeat writes during a trial: the I/O sequence stays the same."""
HANG_LIMIT = 10.0
"""Seconds an await may take before the trial counts it as a hang."""
LOCK_HOLD = 0.003
"""Seconds the other connection holds the write lock at each call (PATH writer-thread)."""


class LockHolder:
    """Another connection, on SQLite's own VFS (its I/O neither counted nor failed), that
    takes the write lock before a call and drops it moments later: zincir's inline commit
    finds the database busy and hands its batch to the writer thread, which waits."""

    def __init__(self, database: Path) -> None:
        self._conn = apsw.Connection(str(database), vfs="unix")
        self._release: threading.Timer | None = None

    def hold(self) -> None:
        """Take the write lock; a timer thread drops it after :data:`LOCK_HOLD`."""
        self._conn.execute("BEGIN IMMEDIATE")
        self._release = threading.Timer(LOCK_HOLD, self._conn.execute, ("ROLLBACK",))
        self._release.start()

    def wait(self) -> None:
        """Wait until the lock taken by :meth:`hold` is dropped."""
        if self._release is not None:
            self._release.join()
            self._release = None

    def close(self) -> None:
        """Drop the lock if held, then close the connection."""
        self.wait()
        self._conn.close()


@dataclass
class Failure:
    """An error a zincir call raised: typed when it is a ZincirError; for an untyped one,
    the last line of zincir's own code it passed through."""

    call: str
    type: str
    typed: bool
    message: str
    escaped_at: str = ""

    @classmethod
    def of(cls, call: str, error: BaseException) -> Failure:
        """Describe ``error``, raised by the zincir call named ``call``."""
        typed = isinstance(error, zincir.ZincirError)
        escaped_at = ""
        if not typed:
            for frame in traceback.extract_tb(error.__traceback__):
                if f"{os.sep}zincir{os.sep}" in frame.filename:
                    path = frame.filename.split(f"{os.sep}zincir{os.sep}", 1)[1]
                    escaped_at = f"zincir/{path}:{frame.lineno} {frame.line}"
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        return cls(call, kind, typed, str(error)[:300], escaped_at)


@dataclass
class Trial:
    """What one fault point did: what was acknowledged, what failed, and the same-store resume."""

    k: int
    eligible: int = 0
    injected: int = 0
    first_fault: str = ""
    calls: dict[str, int] = field(default_factory=dict)
    opened: bool = False
    acked_steps: list[str] = field(default_factory=list)
    completed: bool = False
    closed: bool = False
    failures: list[Failure] = field(default_factory=list)
    hang: str | None = None
    same_store: str = "not tried"
    same_store_reruns: list[str] = field(default_factory=list)
    writer_thread_commits: int = 0


class Runner:
    """Runs the trials of one fault kind and mode, in this process, on the fault VFS."""

    def __init__(
        self, base: Path, workdir: Path, plan: FaultPlan, synchronous: str, contended: bool
    ) -> None:
        self.base = base
        self.workdir = workdir
        self.plan = plan
        self.synchronous: Any = synchronous
        self.contended = contended
        self.holder: LockHolder | None = None
        self.vfs = FaultVFS()

    async def call(self, trial: Trial, name: str, awaitable: Awaitable[T]) -> T | None:
        """Await a zincir call (with the write lock held elsewhere for a moment, on the
        writer-thread path); record its failure (typed or not) or hang; None if it failed."""
        holder = self.holder
        if holder is not None:
            holder.hold()
        try:
            return await asyncio.wait_for(awaitable, HANG_LIMIT)
        except TimeoutError:
            trial.hang = trial.hang or name
        except Exception as error:
            trial.failures.append(Failure.of(name, error))
        finally:
            if holder is not None:
                holder.wait()
        return None

    async def trial(self, k: int) -> Trial:
        """One fault point: the faulty run, the crash snapshot, then the same-store resume."""
        trial = Trial(k)
        folder = self.workdir / str(k)
        folder.mkdir()
        database = folder / "zincir.db"
        shutil.copyfile(self.base, database)
        clock = FakeClock()
        self.vfs.arm(FaultPlan(self.plan.kind, k, self.plan.persistent))
        store = None
        try:
            store = zincir.open_store(str(database), synchronous=self.synchronous, clock=clock)
            trial.opened = True
        except Exception as error:
            trial.failures.append(Failure.of("open_store", error))
        wf = None
        self.holder = LockHolder(database) if self.contended else None
        if store is not None:
            wf = await self.call(trial, "open", WorkflowContext.open(store, RUN_ID, LEASE_TTL))
        if wf is not None and store is not None:
            await self.faulty_run(trial, store, wf)
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        trial.eligible, trial.injected = self.vfs.eligible, self.vfs.injected
        trial.calls = dict(self.vfs.calls)
        trial.first_fault = self.vfs.failed[0] if self.vfs.failed else ""
        self.vfs.disarm()
        crash = folder / "crash"
        crash.mkdir()
        for suffix in ("", "-wal"):
            if Path(f"{database}{suffix}").exists():
                shutil.copyfile(f"{database}{suffix}", crash / f"zincir.db{suffix}")
        if store is not None and not trial.closed:
            await self.resume_same_store(trial, store, wf, clock)
        return trial

    async def faulty_run(self, trial: Trial, store: zincir.Store, wf: WorkflowContext) -> None:
        """The workload under the fault: steps, completion and close; stops at an error."""
        results = []
        for name in STEPS:
            result = await self.call(trial, f"step {name}", wf.step(name, name.upper))
            if result is None:
                return
            results.append(result)
            trial.acked_steps.append(name)
        if await self.call(trial, "complete", _true(wf.complete(results))) is None:
            return
        trial.completed = True
        trial.writer_thread_commits = store.writer_stats.batch_commits
        if self.holder is not None:  # closing: nobody else holds the database
            self.holder.close()
            self.holder = None
        if await self.call(trial, "store.close", _true(store.close())) is None:
            return
        trial.closed = True

    async def resume_same_store(
        self,
        trial: Trial,
        store: zincir.Store,
        wf: WorkflowContext | None,
        clock: FakeClock,
    ) -> None:
        """After the fault cleared: finish the run on the store that saw the error."""
        failures = len(trial.failures)
        if wf is not None:
            await self.call(trial, "close after the fault", _true(wf.close()))
        clock.advance(LEASE_TTL.total_seconds() * 2)  # a lease left by a failed release lapses
        reruns: Counter[str] = Counter()
        if not trial.completed:
            resumed = await self.call(trial, "resume: open", WorkflowContext.open(store, RUN_ID))
            if resumed is not None:
                await self.call(trial, "resume: recover", resumed.recover())
                results = []
                for name in STEPS:

                    def body(name: str = name) -> str:
                        reruns[name] += 1
                        return name.upper()

                    step = resumed.step(name, body)
                    result = await self.call(trial, f"resume: step {name}", step)
                    if result is None:
                        break
                    results.append(result)
                else:
                    await self.call(trial, "resume: complete", _true(resumed.complete(results)))
        resumed_ok = len(trial.failures) == failures and trial.hang is None
        if await self.call(trial, "resume: store.close", _true(store.close())) is None:
            resumed_ok = False
        trial.same_store = "resumed" if resumed_ok else "failed"
        trial.same_store_reruns = sorted(reruns)


async def _true(awaitable: Awaitable[Any]) -> bool:
    """Await a call that returns nothing; True once it returned (None means it failed)."""
    await awaitable
    return True


async def main(argv: list[str]) -> None:
    """Run every trial given on the command line, reporting each on stdout."""
    base, workdir, kind, mode, synchronous, path, *points = argv
    assert kind in ("ioerr", "full") and mode in ("once", "persistent")
    assert path in ("inline", "writer-thread")
    plan = FaultPlan("ioerr" if kind == "ioerr" else "full", 0, persistent=mode == "persistent")
    runner = Runner(Path(base), Path(workdir), plan, synchronous, path == "writer-thread")
    for point in points:
        print("start", point, flush=True)
        trial = await runner.trial(int(point))
        print(json.dumps(asdict(trial)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
