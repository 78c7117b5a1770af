"""Split brain: an owner paused past its lease while another process takes its run over.

Each pause point is one owner process (``_procs/split_owner.py``) writing steps, events and
tool calls to its own run on its own SQLite file, stopped with SIGSTOP after a random
delay, wherever that lands. If it was stopped holding SQLite's write lock (no other
process can write then, so no takeover is possible) it is let run a millisecond at a time
until it is out of the transaction. Once its lease has expired this process claims the run
as a ResumeWorker does, writes as the new owner, sends SIGCONT and keeps writing while the
old owner runs again. The old owner must meet a lease error on its next write and exit;
the database must hold nothing it wrote after the claim, a gapless log, and every write it
was told had succeeded.

The starved-loop part blocks an owner's event loop with a CPU-bound handler past its lease
deadline (``_procs/starved_owner.py``) and checks that it starts no step body or tool call
after that deadline, with and without another process taking the run over meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import zincir
from reliability._harness import Figure, Report, at_least, equal
from reliability._procs import Child, percentile, query, wait_stopped, write_lock_held
from reliability._procs.split_owner import NOTE, PHASES
from zincir._time import from_db
from zincir.store import Lease, NewEvent
from zincir.store._sql import lagging_last_seq as last_seq_sql

ORDER = 5
TITLE = "Split brain: a paused owner after a takeover"

TTL = 0.2
"""The paused owner's lease, in seconds: short, so each pause costs little."""
PAUSES = {True: 24, False: 1000}
LANES = {True: 3, False: 4}
"""Pause points run side by side (each on its own file)."""
NEW_OWNER = "split-brain-new-owner"
LOCK_NUDGES = 500
"""How many one-millisecond runs a paused owner gets to leave a write transaction."""


@dataclass
class PausePoint:
    """What one pause and takeover showed."""

    phase: str
    held_write_lock: bool
    exit: str
    late_writes: int = 0
    gaps: int = 0
    lost_acks: int = 0
    stop_seconds: float = 0.0
    new_owner_writes: int = 0
    problems: list[str] = field(default_factory=list)


def run(short: bool) -> Report:
    """Both parts of the scenario, as one report."""
    report = Report("split_brain", TITLE, short=short)
    for part in (paused_owners(short), starved_loop()):
        report.figures += part.figures
        report.notes += part.notes
    return report


# -- paused owners ----------------------------------------------------------------------


def paused_owners(short: bool) -> Report:
    """Pause owners at random points, take their runs over, and count what got through."""
    count, lanes = PAUSES[short], LANES[short]
    with tempfile.TemporaryDirectory(prefix="zincir-split-brain-") as folder:
        points = asyncio.run(_pause_all(Path(folder), count, lanes))
    fenced = sum(point.exit in ("FencedOut", "LeaseLost") for point in points)
    stops = [point.stop_seconds for point in points if point.exit in ("FencedOut", "LeaseLost")]
    figures: list[Figure] = [
        at_least("pause points", len(points), count),
        equal("old-owner writes stored after the takeover", sum(p.late_writes for p in points), 0),
        equal("old owners that stopped on a lease error (%)", _percent(fenced, len(points)), 100),
        equal("seq gaps", sum(p.gaps for p in points), 0),
        equal("acknowledged writes missing", sum(p.lost_acks for p in points), 0),
    ]
    phases = Counter(point.phase for point in points)
    exits = Counter(point.exit for point in points)
    held = sum(point.held_write_lock for point in points)
    notes = [
        f"Lease TTL {TTL * 1000:.0f} ms; {lanes} owner/new-owner pairs at a time, each on its "
        "own SQLite file; the new owner claims as a ResumeWorker does (claim_runs) and keeps "
        "appending while the old owner runs again.",
        "Where the pauses landed: "
        + ", ".join(f"{name} {phases[name]}" for name in PHASES if phases[name])
        + f"; {held} of them inside a write transaction (the owner then holds SQLite's write "
        "lock, so nobody can take over; it was let run 1 ms at a time until out of it).",
        "How the old owners stopped: "
        + ", ".join(f"{k} {v}" for k, v in sorted(exits.items()))
        + f"; SIGCONT to exit p50 {percentile(stops, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(stops, 0.99) * 1000:.0f} ms; the new owners stored "
        f"{sum(p.new_owner_writes for p in points):,} writes meanwhile.",
    ]
    problems = [f"pause {i}: {text}" for i, p in enumerate(points) for text in p.problems]
    notes += problems[:10]
    return Report("split_brain", TITLE, figures, notes, short=short)


def _percent(part: int, whole: int) -> float:
    return 0.0 if whole == 0 else round(100.0 * part / whole, 2)


async def _pause_all(folder: Path, count: int, lanes: int) -> list[PausePoint]:
    """Run ``count`` pause points, ``lanes`` at a time."""
    indexes = iter(range(count))
    points: list[PausePoint] = []

    async def lane() -> None:
        for index in indexes:
            points.append(await _pause_one(folder, index))

    await asyncio.gather(*(lane() for _ in range(lanes)))
    return points


async def _pause_one(folder: Path, index: int) -> PausePoint:
    """One owner process, paused at a random point, its run taken over, then continued."""
    chance = random.Random(index)
    db = folder / f"pause-{index}.db"
    run_id = f"split-{index}"
    phase_file = folder / f"pause-{index}.phase"
    phase_file.write_bytes(b"\0")
    store = zincir.open_store(db)  # migrates the file before the owner opens it
    child = await Child.start("split_owner", str(db), run_id, str(TTL), str(phase_file), str(index))
    try:
        await child.expect("ready")
        await asyncio.sleep(chance.uniform(0, 0.15))
        phase, held = _stop(child.pid, db, phase_file)
        [(expires,)] = query(db, "SELECT lease_expires_at FROM agent_runs WHERE id = ?", (run_id,))
        left = (from_db(expires) - datetime.now(UTC)).total_seconds()
        await asyncio.sleep(max(left, 0.0) + 0.005)
        lease = await _claim(store, run_id)
        await _note(store, lease)
        writes = 1
        continued = time.monotonic()
        os.kill(child.pid, signal.SIGCONT)
        finishing = asyncio.ensure_future(child.finish(timeout=15.0))
        while not finishing.done():  # both owners are live now: only one may write
            await _note(store, lease)
            writes += 1
            await asyncio.sleep(0.002)
        code = await finishing
        stop_seconds = time.monotonic() - continued
        point = PausePoint(phase, held, _exit(child, code), stop_seconds=stop_seconds)
        point.new_owner_writes = writes
        _check(db, run_id, lease, child.lines, point)
        return point
    finally:
        await child.close()
        await store.close()


def _stop(pid: int, db: Path, phase_file: Path) -> tuple[str, bool]:
    """SIGSTOP the owner; return where it landed and whether it held the write lock (it is
    then let run a millisecond at a time until it no longer does)."""
    os.kill(pid, signal.SIGSTOP)
    wait_stopped(pid)
    with open(phase_file, "rb") as file, mmap.mmap(file.fileno(), 1, access=mmap.ACCESS_READ) as m:
        phase = PHASES[m[0]]
    held = False
    for _ in range(LOCK_NUDGES):
        if not write_lock_held(db):
            return phase, held
        held = True
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.001)
        os.kill(pid, signal.SIGSTOP)
        wait_stopped(pid)
    raise RuntimeError(f"the paused owner of {db} kept the write lock")


async def _claim(store: zincir.store.Store, run_id: str) -> Lease:
    """Claim the expired run as a ResumeWorker does (a new fencing token)."""
    for _ in range(200):
        leases = await store.claim_runs(
            NEW_OWNER,
            timedelta(seconds=60),
            1,
            max_attempts=None,
            backoff=lambda attempt: timedelta(0),
        )
        if leases:
            [lease] = leases
            if lease.run_id != run_id:
                raise RuntimeError(f"claimed {lease.run_id}, expected {run_id}")
            return lease
        await asyncio.sleep(0.01)
    raise RuntimeError(f"run {run_id} never became claimable")


async def _note(store: zincir.store.Store, lease: Lease) -> None:
    """One write of the new owner: an event the old owner never writes."""
    await store.append_events(lease, [NewEvent(NOTE, json.dumps({"token": lease.token}))])


def _exit(child: Child, code: int | None) -> str:
    """How the old owner ended: the lease error it met, or what went wrong instead."""
    if code is None:
        return "did not stop"
    last = child.lines[-1] if child.lines else ""
    if code == 0 and last.startswith("fenced "):
        return last.split()[1]
    return f"exit {code}: {last[:80]}"


def _check(db: Path, run_id: str, lease: Lease, lines: list[str], point: PausePoint) -> None:
    """Count in the database what the old owner stored after the claim, gaps, lost acks."""
    claims = query(
        db,
        "SELECT seq, created_at FROM events WHERE run_id = ? AND type = 'run_claimed'",
        (run_id,),
    )
    if len(claims) != 1:
        point.problems.append(f"{len(claims)} run_claimed events")
        point.late_writes += 1
        return
    [(claim_seq, claimed_at)] = claims
    late_events = query(
        db,
        "SELECT seq, type FROM events WHERE run_id = ? AND seq > ? AND type != ?",
        (run_id, claim_seq, NOTE),
    )
    late_steps = query(
        db,
        "SELECT name FROM steps WHERE run_id = ? AND (started_at > ? OR completed_at > ?)",
        (run_id, claimed_at, claimed_at),
    )
    late_operations = query(
        db,
        "SELECT sequence FROM operations WHERE run_id = ? AND updated_at > ?",
        (run_id, claimed_at),
    )
    [(owner, token, last_seq)] = query(
        db,
        f"SELECT lease_owner, lease_token, {last_seq_sql()} FROM agent_runs WHERE id = ?",
        (run_id,),
    )
    point.late_writes = len(late_events) + len(late_steps) + len(late_operations)
    if (owner, token) != (NEW_OWNER, lease.token):
        point.late_writes += 1
        point.problems.append(f"the run's lease is {owner} #{token} after the takeover")
    if point.late_writes:
        point.problems.append(
            f"stored after the claim: events {late_events[:5]}, steps {late_steps[:5]}, "
            f"operations {late_operations[:5]}"
        )
    seqs = [
        seq
        for (seq,) in query(db, "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    ]
    if seqs != list(range(1, last_seq + 1)):
        point.gaps = 1
        point.problems.append(f"seqs are not 1..{last_seq}")
    point.lost_acks = sum(not _stored(db, run_id, line) for line in lines if line.startswith("ok "))
    if point.lost_acks:
        point.problems.append(f"{point.lost_acks} acknowledged writes missing")


def _stored(db: Path, run_id: str, line: str) -> bool:
    """Whether the write the owner acknowledged with ``line`` (``ok KIND I``) is stored."""
    _, kind, index = line.split()
    if kind == "step":
        sql = "SELECT 1 FROM steps WHERE run_id = ? AND name = ? AND status = 'completed'"
        return bool(query(db, sql, (run_id, f"step-{index}")))
    if kind in ("response", "result"):
        event = "tool_call" if kind == "response" else "tool_result"
        sql = "SELECT 1 FROM events WHERE run_id = ? AND type = ? AND tool_call_id = ?"
        return bool(query(db, sql, (run_id, event, f"call-{index}")))
    sql = (
        "SELECT 1 FROM operations WHERE run_id = ? AND step_id = 'probe' AND sequence = ? "
        "AND status = 'completed'"
    )
    return bool(query(db, sql, (run_id, int(index))))


# -- a starved event loop ---------------------------------------------------------------

STARVED_CASES = (("step", False), ("tool", False), ("step", True), ("tool", True))
"""(work kind, whether another process takes the run over while the loop is blocked)."""


def starved_loop(taken_over: bool | None = None) -> Report:
    """Block owners' loops past their lease deadline; count work started after it (only the
    cases with, or without, a takeover when ``taken_over`` says which)."""
    cases = [case for case in STARVED_CASES if taken_over in (None, case[1])]
    with tempfile.TemporaryDirectory(prefix="zincir-starved-") as folder:
        outcomes = asyncio.run(_starve_all(Path(folder), cases))
    figures = [
        equal(
            f"{'step bodies' if kind == 'step' else 'tool calls'} started after the lease "
            f"deadline, starved loop{', run taken over' if takeover else ''}",
            late,
            0,
        )
        for (kind, takeover), (late, _) in zip(cases, outcomes, strict=True)
    ]
    notes = [
        "A CPU-bound handler blocks the owner's event loop until two TTLs past its lease "
        f"expiry (TTL {TTL * 1000:.0f} ms), then starts a step or a tool call: "
        + "; ".join(
            f"{kind}{' (taken over)' if takeover else ''}: {said}"
            for (kind, takeover), (_, said) in zip(cases, outcomes, strict=True)
        )
        + "."
    ]
    return Report("split_brain", TITLE, figures, notes)


async def _starve_all(folder: Path, cases: list[tuple[str, bool]]) -> list[tuple[int, str]]:
    return [
        await _starve_one(folder, index, kind, takeover)
        for index, (kind, takeover) in enumerate(cases)
    ]


async def _starve_one(folder: Path, index: int, kind: str, takeover: bool) -> tuple[int, str]:
    """One starved owner; (1 if its work started after the deadline else 0, what it said)."""
    db = folder / f"starved-{index}.db"
    run_id = f"starved-{index}"
    store = zincir.open_store(db)
    child = await Child.start("starved_owner", str(db), run_id, str(TTL), kind)
    try:
        deadline = float((await child.expect("starving ")).split()[1])
        if takeover:
            await asyncio.sleep(max(deadline - time.time(), 0.0) + 0.01)
            await _claim(store, run_id)
        code = await child.finish(timeout=30.0)
        said = [line for line in child.lines if line.startswith(("started", "refused"))]
        if code != 0 or child.lines[-1:] != ["done"]:
            return 1, f"exit {code}: {child.lines[-3:]} {await child.stderr()}"[:300]
        late = sum(line == "started 1" for line in said)
        return int(late > 0), ", ".join(
            "body started after the deadline"
            if line == "started 1"
            else "body started in time"
            if line == "started 0"
            else line
            for line in said
        )
    finally:
        await child.close()
        await store.close()
