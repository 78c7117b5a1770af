"""Power loss: a writer killed at a random moment, and every write it never fsynced dropped.

A child process writes workflow steps through :class:`reliability._fault_vfs.FaultVFS`,
which keeps each file's durable image (what an fsync covered). The parent SIGKILLs it after
a random number of acknowledged steps, or at a random time from its start (often while it
opens or migrates the database), puts the durable images in place, deletes the ``-shm``,
then checks the database with ``PRAGMA integrity_check`` and zincir itself against the
steps the child acknowledged. With ``synchronous="full"`` every acknowledged step must be
there; with ``"normal"`` only a suffix of the latest may be missing, never one in the
middle. Each database lives through several power losses before a fresh one is started.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

import apsw

import zincir
from reliability._children import FAST_FOLDER, Child
from reliability._fault_vfs import lose_power
from reliability._harness import Figure, Report, at_least, equal

ORDER = 3
TITLE = "Power loss"
KEY = "power_loss"

SYNC_MODES = ("full", "normal")
ROUNDS = {True: 12, False: 250}
"""Power losses per sync mode: short counts (``make test``), then full counts."""
ROUNDS_PER_DATABASE = 10
MAX_ACKS_BEFORE_KILL = 80
TIMED_KILL_SHARE = 0.25
TIMED_KILL_WINDOW = (0.15, 0.6)
"""Seconds from the child's start: its interpreter starts, opens and migrates the store."""
CHILD_SILENCE_LIMIT = 30.0


@dataclass
class ModeTally:
    """What the power losses of one sync mode found."""

    power_losses: int = 0
    acknowledged: int = 0
    acknowledged_lost: int = 0
    lost_in_middle: int = 0
    suffix_lost: list[int] = field(default_factory=list)
    integrity_failures: int = 0
    earlier_lost: int = 0
    killed_before_first_ack: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Acks:
    """The steps a child acknowledged, in the order it acknowledged them."""

    order: list[tuple[str, int]]
    positions: dict[tuple[str, int], int]

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Acks:
        """Read ``ack RUN N`` lines (other lines are ignored)."""
        order = []
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ack":
                order.append((parts[1], int(parts[2])))
        return cls(order, {ack: position for position, ack in enumerate(order)})

    def position(self, run_id: str, number: int) -> int | None:
        """Where the acknowledgement of step ``number`` of ``run_id`` came, if it came."""
        return self.positions.get((run_id, number))


def lost_in_middle(acks: Acks, durable: dict[str, set[int]]) -> int:
    """Acknowledged steps missing although a step that began after their acknowledgement
    survived: a hole in the commit order, which no sync setting may leave."""
    holes = 0
    for position, (run_id, number) in enumerate(acks.order):
        if number in durable.get(run_id, set()):
            continue
        for later_run, numbers in durable.items():
            if any(
                (began := _began_after(acks, later_run, later)) is not None and began >= position
                for later in numbers
            ):
                holes += 1
                break
    return holes


def _began_after(acks: Acks, run_id: str, number: int) -> int | None:
    """The acknowledgement after which step ``number`` of ``run_id`` began (its run's
    previous step), or None for a run's first step."""
    if number == 1:
        return None
    return acks.position(run_id, number - 1)


def _durable_steps(database: Path) -> dict[str, set[int]]:
    """The completed steps per run, read with a plain connection."""
    conn = apsw.Connection(str(database))
    try:
        durable: dict[str, set[int]] = {}
        for run_id, name in conn.execute(
            "SELECT run_id, name FROM steps WHERE status = 'completed'"
        ):
            durable.setdefault(str(run_id), set()).add(int(str(name)[1:]))
        return durable
    finally:
        conn.close()


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


async def _check_with_zincir(database: Path, synchronous: str, runs: list[str]) -> str | None:
    """Open the store with zincir and check each run's log against its steps table;
    the problem found, or None."""
    try:
        store = zincir.open_store(
            str(database), synchronous="full" if synchronous == "full" else "normal"
        )
    except zincir.ZincirError as error:
        return f"zincir could not open the database: {error!r}"
    try:
        durable = _durable_steps(database)
        for run_id in runs:
            events = await store.list_events(run_id)
            seqs = [event.seq for event in events]
            if seqs != list(range(1, len(seqs) + 1)):
                return f"run {run_id}: event seqs are not 1..n: {seqs[:10]}…"
            logged = sum(event.type == "step_completed" for event in events)
            stored = len(durable.get(run_id, set()))
            if logged != stored:
                return f"run {run_id}: {logged} step_completed events but {stored} steps"
    finally:
        await store.close()
    return None


class PowerLossSeries:
    """One sync mode's power losses, on a database replaced every few rounds."""

    def __init__(self, synchronous: str, workdir: Path, rng: random.Random) -> None:
        self.synchronous = synchronous
        self.workdir = workdir
        self.rng = rng
        self.tally = ModeTally()
        self.verified: dict[str, int] = {}
        self.database = workdir / "none.db"

    def run(self, rounds: int) -> ModeTally:
        """Simulate ``rounds`` power losses."""
        for number in range(rounds):
            if number % ROUNDS_PER_DATABASE == 0:
                self.database = self.workdir / f"{self.synchronous}-{number:04d}" / "zincir.db"
                self.database.parent.mkdir()
                self.verified = {}
            self.one_round(f"{self.synchronous}{number:04d}")
        return self.tally

    def one_round(self, prefix: str) -> None:
        """Start a writer, cut its power at a random moment, then check what survived."""
        tally, rng = self.tally, self.rng
        child = Child(
            "power_loss_child",
            str(self.database),
            self.synchronous,
            prefix,
            str(rng.randrange(2**31)),
            stderr_path=self.database.parent / f"{prefix}.stderr",
        )
        lines: list[str] = []
        try:
            if rng.random() < TIMED_KILL_SHARE:
                time.sleep(rng.uniform(*TIMED_KILL_WINDOW))
            else:
                wanted = rng.randint(1, MAX_ACKS_BEFORE_KILL)
                while sum(line.startswith("ack") for line in lines) < wanted:
                    line = child.line(timeout=CHILD_SILENCE_LIMIT)
                    if line is None:
                        break
                    lines.append(line)
        finally:
            lines += child.kill()
        if child.process.returncode != -9:
            tally.problems.append(
                f"{prefix}: the writer exited by itself ({child.process.returncode}): "
                f"{child.stderr()[-500:]}"
            )
        lose_power(self.database)
        tally.power_losses += 1
        self.check(prefix, Acks.parse(lines))

    def check(self, prefix: str, acks: Acks) -> None:
        """Compare the database after the power loss with what the writer acknowledged."""
        tally = self.tally
        runs = [f"{prefix}-a", f"{prefix}-b"]
        verdict = _integrity(self.database)
        problem = asyncio.run(_check_with_zincir(self.database, self.synchronous, runs))
        if verdict != "ok" or problem is not None:
            tally.integrity_failures += 1
            tally.problems.append(f"{prefix}: integrity {verdict!r}; {problem}")
            return
        durable = _durable_steps(self.database)
        if not acks.order:
            tally.killed_before_first_ack += 1
        tally.acknowledged += len(acks.order)
        lost = sum(number not in durable.get(run, set()) for run, number in acks.order)
        tally.acknowledged_lost += lost if self.synchronous == "full" else 0
        holes = lost_in_middle(acks, durable)
        tally.lost_in_middle += holes
        if self.synchronous == "normal" and acks.order:
            tally.suffix_lost.append(lost)
        if (self.synchronous == "full" and lost) or holes:
            tally.problems.append(f"{prefix}: {lost} acknowledged steps lost, {holes} mid-order")
        for run_id, count in self.verified.items():
            now = len(durable.get(run_id, set()))
            if now < count:
                tally.earlier_lost += count - now
                tally.problems.append(f"{run_id}: {count - now} steps verified earlier are gone")
        for run_id in runs:
            self.verified[run_id] = len(durable.get(run_id, set()))


def run(short: bool) -> Report:
    """Simulate power losses under both sync modes and count what was lost."""
    rounds = ROUNDS[short]
    rng = random.Random(20_260_530)
    tallies: dict[str, ModeTally] = {}
    with tempfile.TemporaryDirectory(prefix="zincir-power-loss-", dir=FAST_FOLDER) as folder:
        for synchronous in SYNC_MODES:
            workdir = Path(folder) / synchronous
            workdir.mkdir()
            series = PowerLossSeries(synchronous, workdir, random.Random(rng.random()))
            tallies[synchronous] = series.run(rounds)
    full, normal = tallies["full"], tallies["normal"]
    mean_suffix = fmean(normal.suffix_lost) if normal.suffix_lost else 0.0
    figures = [
        at_least("power losses simulated, synchronous=full", full.power_losses, rounds),
        at_least("power losses simulated, synchronous=normal", normal.power_losses, rounds),
        Figure(
            "steps acknowledged before the power losses",
            full.acknowledged + normal.acknowledged,
            "informational",
            True,
        ),
        equal("acknowledged steps lost, synchronous=full", full.acknowledged_lost, 0),
        equal(
            "steps lost in the middle (a later one survived)",
            full.lost_in_middle + normal.lost_in_middle,
            0,
        ),
        Figure(
            "mean acknowledged steps lost per power loss, synchronous=normal (latest ones)",
            round(mean_suffix, 2),
            "informational",
            True,
        ),
        equal("integrity failures", full.integrity_failures + normal.integrity_failures, 0),
        equal(
            "steps verified after one power loss, gone after a later one",
            full.earlier_lost + normal.earlier_lost,
            0,
        ),
    ]
    notes = [
        "Each power loss: a child process opens the store through a VFS that records every "
        "write and applies it to a durable image of its file only at fsync; two workflows "
        "write steps concurrently (shared group commits), and another connection checkpoints "
        "after about one step in eight. The parent SIGKILLs the child after 1 to "
        f"{MAX_ACKS_BEFORE_KILL} acknowledged steps, or ({TIMED_KILL_SHARE:.0%} of rounds) "
        f"{TIMED_KILL_WINDOW[0]:g} to {TIMED_KILL_WINDOW[1]:g} s after it started; then every "
        "database and WAL file is replaced by its durable image and the -shm deleted.",
        "A step is acknowledged when `await wf.step(…)` returned and the child printed it; "
        "the parent then checks PRAGMA integrity_check, that zincir opens the file, that each "
        "run's event seqs are 1..n and agree with its steps, and that steps verified after "
        f"earlier power losses on the same database (one database per {ROUNDS_PER_DATABASE} "
        "rounds) are still there.",
        f"Kills before the first acknowledgement: {full.killed_before_first_ack} (full), "
        f"{normal.killed_before_first_ack} (normal); they test opening, migrating and the first "
        "claims.",
        f"Files in {FAST_FOLDER or 'the temporary folder'}: what survives is decided by the "
        "VFS's durable images, not by the disk. Model limits: unsynced writes are all "
        "dropped (a real disk may keep any subset; "
        "SQLite's WAL checksums are designed for that), a file deletion is durable at once, "
        "and writes an fsync covers are applied in order (a kill during the copy leaves a "
        "prefix).",
    ]
    notes += [f"Problem: {problem}" for problem in (full.problems + normal.problems)[:10]]
    return Report(KEY, TITLE, figures, notes, short=short)
