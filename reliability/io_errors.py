"""I/O errors and a full disk: every I/O operation of a workflow's life fails in turn.

A child process runs a workflow (open the store, open the run, four steps, complete, close
the store) on :class:`reliability._fault_vfs.FaultVFS`, which fails the k-th I/O operation
(``SQLITE_IOERR_*`` on any open, read, write, sync, truncate, size or lock; or
``SQLITE_FULL`` on the k-th write) once, or from the k-th on until the fault clears, for k
over the workload's whole I/O sequence (counted by a fault-free census run). Each error
must reach the caller as a zincir error, and nothing may hang. When the fault clears, the
files as a crash at that moment would leave them are checked in this (fresh) process: what
was acknowledged is there, what failed is not reported done, and the run resumes and
completes. The child also tries to finish the run on the very store that saw the error.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import apsw

import zincir
from reliability._children import FAST_FOLDER, Child
from reliability._children.io_fault_child import RUN_ID, STEPS
from reliability._harness import Figure, Report, at_least, equal
from zincir.testing import FakeClock
from zincir.workflow import WorkflowContext

ORDER = 4
TITLE = "I/O errors and a full disk"
KEY = "io_errors"

KINDS = ("ioerr", "full")
MODES = ("once", "persistent")
PATHS = ("inline", "writer-thread")
SYNC_MODES = {True: ("full",), False: ("full", "normal")}
SHORT_STRIDE = 8
"""Short counts try every eighth fault point (from a seeded offset); full counts try all."""
WRITER_THREAD_MARGIN = 3
"""Extra fault points past the census on the writer-thread path, whose retries while the
lock is held elsewhere may ask for a file's size a few more times than the census did."""
CENSUS_POINT = 10**9
NOTHING_WRITTEN = "nothing was written"
"""What zincir's StoreUnavailable says of a failed write: a promise the check holds it to."""
TRIAL_SILENCE_LIMIT = 60.0


@dataclass
class Tally:
    """What the fault points found, summed over kinds, modes and sync settings."""

    tried: int = 0
    planned: int = 0
    controls: int = 0
    controls_clean: int = 0
    untyped: Counter[str] = field(default_factory=Counter)
    hangs: int = 0
    acknowledged_lost: int = 0
    unacknowledged_done: int = 0
    said_nothing_written: int = 0
    said_uncertain: int = 0
    phantom_causes: Counter[str] = field(default_factory=Counter)
    not_resumable: int = 0
    integrity_failures: int = 0
    same_store_tried: int = 0
    same_store_resumed: int = 0
    same_store_failures: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


def _integrity(database: Path) -> str:
    """``PRAGMA integrity_check``'s verdict, or the error that prevented it."""
    try:
        conn = apsw.Connection(str(database))
        try:
            return "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
        finally:
            conn.close()
    except apsw.Error as error:
        return f"{type(error).__name__}: {error}"


def _stored(database: Path) -> tuple[set[str], str | None]:
    """The run's completed steps and its status, read with a plain connection."""
    conn = apsw.Connection(str(database))
    try:
        steps = {
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM steps WHERE run_id = ? AND status = 'completed'", (RUN_ID,)
            )
        }
        row = conn.execute("SELECT status FROM agent_runs WHERE id = ?", (RUN_ID,)).fetchone()
        return steps, None if row is None else str(row[0])
    finally:
        conn.close()


async def resume(database: Path) -> str | None:
    """Finish the run with a fresh store in this process (the fault has cleared): recover
    its claims, replay or run its steps, complete it. The problem met, or None."""
    clock = FakeClock()
    clock.advance(timedelta(days=1).total_seconds())  # any lease left behind has lapsed
    try:
        store = zincir.open_store(str(database), clock=clock)
    except Exception as error:
        return f"open_store: {error!r}"
    try:
        try:
            wf = await WorkflowContext.open(store, RUN_ID)
        except zincir.RunTerminal:
            pass
        else:
            await wf.recover()
            results = [await wf.step(name, name.upper) for name in STEPS]
            await wf.complete(results)
    except Exception as error:
        return f"resume: {error!r}"
    finally:
        await store.close()
    steps, status = _stored(database)
    if status != "completed" or steps != set(STEPS):
        return f"after the resume the run is {status} with steps {sorted(steps)}"
    return None


def check_trial(trial: dict[str, Any], folder: Path, tally: Tally, label: str) -> None:
    """Judge one fault point from the child's report and the files it left."""
    where = f"{label} k={trial['k']}"
    if not trial["injected"]:
        tally.controls += 1
        clean = trial["completed"] and trial["closed"] and not trial["failures"]
        if clean and ("writer-thread" not in label or trial["writer_thread_commits"]):
            tally.controls_clean += 1
        else:
            tally.problems.append(
                f"{where}: the fault-free control failed ({trial['failures']}) or did not "
                f"commit on the writer thread ({trial['writer_thread_commits']})"
            )
    else:
        tally.tried += 1
    for failure in trial["failures"]:
        if not failure["typed"]:
            tally.untyped[f"{failure['type']} from {failure['escaped_at']}"] += 1
    if trial["hang"]:
        tally.hangs += 1
        tally.problems.append(f"{where}: {trial['hang']} hung")
    crash = folder / "crash" / "zincir.db"
    for database in (crash, folder / "zincir.db"):
        verdict = _integrity(database)
        if verdict != "ok":
            tally.integrity_failures += 1
            tally.problems.append(f"{where}: {database.parent.name}: integrity {verdict!r}")
            return
    steps, status = _stored(crash)
    acked = set(trial["acked_steps"])
    lost = len(acked - steps) + int(trial["completed"] and status != "completed")
    phantom = len(steps - acked) + int(status == "completed" and not trial["completed"])
    tally.acknowledged_lost += lost
    tally.unacknowledged_done += phantom
    uncertain = False
    if phantom:
        tally.phantom_causes[trial["first_fault"]] += phantom
        if NOTHING_WRITTEN in trial["failures"][0]["message"]:
            tally.said_nothing_written += phantom
        uncertain = trial["failures"][0]["type"].endswith(".CommitUncertain")
        tally.said_uncertain += phantom if uncertain else 0
    if lost or (phantom and not uncertain):
        errors = [f"{failure['call']}: {failure['message'][:80]}" for failure in trial["failures"]]
        tally.problems.append(
            f"{where} ({trial['first_fault']} failed): acknowledged {sorted(acked)}, "
            f"completed={trial['completed']}; after a crash {sorted(steps)}, run {status}; "
            f"errors {errors}"
        )
    finished_here = trial["same_store"] == "resumed" or trial["closed"]
    for database in (crash,) if finished_here else (crash, folder / "zincir.db"):
        problem = asyncio.run(resume(database))
        if problem is not None:
            tally.not_resumable += 1
            tally.problems.append(f"{where}: {database.parent.name}: {problem}")
    if finished_here:
        steps, status = _stored(folder / "zincir.db")
        if status != "completed" or steps != set(STEPS):
            tally.not_resumable += 1
            tally.problems.append(f"{where}: the same store left the run {status}, {steps}")
    if trial["same_store"] != "not tried":
        tally.same_store_tried += 1
        rerun = acked & set(trial["same_store_reruns"])
        if rerun:  # the store that acknowledged these steps lost them while it stayed open
            tally.acknowledged_lost += len(rerun)
            tally.problems.append(f"{where}: the same store ran {sorted(rerun)} again")
        if trial["same_store"] == "resumed":
            tally.same_store_resumed += 1
        else:
            after = [f for f in trial["failures"] if f["call"].startswith(("resume", "close"))]
            cause = f"{after[0]['call']}: {after[0]['type']}" if after else str(trial["hang"])
            tally.same_store_failures[cause] += 1


def run_batch(
    base: Path, workdir: Path, setting: tuple[str, str, str, str], points: list[int]
) -> list[dict[str, Any]]:
    """Run the fault points in child processes (a new one after a hang); their reports."""
    reports: list[dict[str, Any]] = []
    remaining = list(points)
    while remaining:
        child = Child(
            "io_fault_child",
            str(base),
            str(workdir),
            *setting,
            *map(str, remaining),
            stderr_path=workdir / f"stderr-{remaining[0]}.txt",
        )
        current: int | None = None
        try:
            while (line := child.line(timeout=TRIAL_SILENCE_LIMIT)) is not None:
                if line.startswith("start "):
                    current = int(line.split()[1])
                elif line.startswith("{"):
                    reports.append(json.loads(line))
                    remaining.remove(reports[-1]["k"])
                    current = None
        except TimeoutError:
            pass
        finally:
            child.kill()
        if current is None and remaining:
            raise RuntimeError(f"the fault child died: {child.stderr()[-2000:]}")
        if current is not None:  # it hung outside any await the child could time out
            reports.append(_hung(current))
            remaining.remove(current)
            (workdir / str(current)).rename(workdir / f"{current}-hung")
    return reports


def _hung(point: int) -> dict[str, Any]:
    """The report of a fault point whose child stopped answering (killed by the parent)."""
    return {"k": point, "hang": "the whole process", "injected": 1, "failures": []}


def fault_points(eligible: int, margin: int, short: bool, rng: random.Random) -> list[int]:
    """The k to try for a sequence of ``eligible`` operations, then ``margin`` more and one
    past them all (a fault-free control)."""
    end = eligible + margin + 1
    if not short:
        return list(range(1, end + 1))
    offset = rng.randrange(SHORT_STRIDE)
    return [*range(1 + offset, end, SHORT_STRIDE), end]


def run(short: bool) -> Report:
    """Fail each I/O operation of a workflow's life in turn and count what went wrong."""
    rng = random.Random(20_260_531)
    tally = Tally()
    ranges: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="zincir-io-errors-", dir=FAST_FOLDER) as folder:
        root = Path(folder)
        base = root / "base.db"
        zincir.open_store(str(base)).close_sync()
        for synchronous in SYNC_MODES[short]:
            for path in PATHS:
                census_dir = root / f"census-{synchronous}-{path}"
                census_dir.mkdir()
                setting = ("ioerr", "once", synchronous, path)
                census = run_batch(base, census_dir, setting, [CENSUS_POINT])[0]
                counts = {
                    "ioerr": int(census["eligible"]),
                    "full": int(census["calls"].get("write", 0)),
                }
                margin = WRITER_THREAD_MARGIN if path == "writer-thread" else 0
                for kind in KINDS:
                    ranges[f"{kind}/{synchronous}/{path}"] = counts[kind]
                    for mode in MODES:
                        label = f"{kind} {mode} synchronous={synchronous} {path}"
                        workdir = root / f"{kind}-{mode}-{synchronous}-{path}"
                        workdir.mkdir()
                        points = fault_points(counts[kind], margin, short, rng)
                        sure = counts[kind] - margin  # reached whatever the timing
                        tally.planned += sum(point <= sure for point in points)
                        setting = (kind, mode, synchronous, path)
                        for trial in run_batch(base, workdir, setting, points):
                            if trial.get("hang") == "the whole process":
                                tally.hangs += 1
                                tally.tried += 1
                                continue
                            check_trial(trial, workdir / str(trial["k"]), tally, label)
                            shutil.rmtree(workdir / str(trial["k"]))
    return _report(tally, ranges, short)


def _report(tally: Tally, ranges: dict[str, int], short: bool) -> Report:
    untyped = sum(tally.untyped.values())
    figures = [
        at_least(
            "fault points tried (k × once/persistent × I/O error/full disk × commit path)",
            tally.tried,
            tally.planned,
        ),
        equal("untyped errors (not a ZincirError)", untyped, 0),
        equal("hangs", tally.hangs, 0),
        equal("acknowledged writes lost", tally.acknowledged_lost, 0),
        equal(
            f"failed writes found done after a crash, the error having said {NOTHING_WRITTEN!r}",
            tally.said_nothing_written,
            0,
        ),
        equal(
            "failed writes found done after a crash whose error was not CommitUncertain",
            tally.unacknowledged_done - tally.said_uncertain,
            0,
        ),
        Figure(
            "failed writes found done after a crash (CommitUncertain: the outcome unknown)",
            tally.unacknowledged_done,
            "informational",
            True,
        ),
        equal("runs not resumable after the fault clears (fresh process)", tally.not_resumable, 0),
        equal("integrity failures", tally.integrity_failures, 0),
        equal("fault-free control runs not clean", tally.controls - tally.controls_clean, 0),
        Figure(
            "runs the same store finished after the fault cleared",
            f"{tally.same_store_resumed} of {tally.same_store_tried}",
            "informational",
            True,
        ),
    ]
    sequence = ", ".join(f"{name}: {count}" for name, count in sorted(ranges.items()))
    notes = [
        "The workload: open the store, WorkflowContext.open, four steps (each a claim and a "
        "result), complete, close the store, on a copy of a migrated empty database. It runs "
        "on the inline commit path (the process's only writer), and on the writer thread: "
        "another connection holds the write lock for 3 ms at each workflow call, as another "
        "process would, so each commit waits on zincir's writer thread. Its I/O sequence "
        "(operations a fault kind can fail, by kind/synchronous/path): "
        f"{sequence}. {'Every eighth k (short counts)' if short else 'Every k'} is tried, "
        "plus one past the end as a fault-free control.",
        "Acknowledged = the await returned. After the error the fault clears; the database "
        "and WAL as they are then (a crash, -shm dropped) are checked in the parent process "
        "and resumed there: recover(), the steps replayed or run, complete.",
        f"Files in {FAST_FOLDER or 'the temporary folder'}. "
        "Ops on the -shm are not failed (the unix VFS maps it itself). APSW raises a Python "
        "VFS's exception even where SQLite ignores the error it returned (a failed "
        "checkpoint inside sqlite3_close), so close() sees errors a C VFS would not show.",
    ]
    if tally.untyped:
        notes.append(
            "Untyped errors, by where they left zincir: "
            + "; ".join(f"{key} ×{count}" for key, count in tally.untyped.most_common())
        )
    if tally.phantom_causes:
        notes.append(
            "Failed writes found done after a crash, by the operation that failed: "
            + "; ".join(f"{key} ×{n}" for key, n in tally.phantom_causes.most_common())
            + ". The WAL's fsync failed after its commit frame was written: SQLite reports "
            "the error, but a restart's WAL recovery finds the commit whole; zincir raises "
            "CommitUncertain (a StoreUnavailable) for it: re-read before acting."
        )
    if tally.same_store_failures:
        notes.append(
            "The same store could not finish the run: "
            + "; ".join(f"{key} ×{n}" for key, n in tally.same_store_failures.most_common())
        )
    notes += [f"Problem: {problem}" for problem in tally.problems[:10]]
    return Report(KEY, TITLE, figures, notes, short=short)
