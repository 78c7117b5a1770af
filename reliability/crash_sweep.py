"""Kill-point sweep: jobs killed with SIGKILL at a named crash point, then resumed.

Each job (``_sweep_workload``: workflow steps, one claimed ahead, a durable sleep, an
operation, a verified checkpoint, a durable agent with two tool calls, a LangGraph graph of
three nodes, all through an external idempotent ledger) runs in a process forked from this
one, armed to kill itself on the ``nth`` hit of one crash point: the points a job reaches
are taken in turn from a shuffled rotation, so each is killed at, and ``nth`` at random.
The job is then resumed in fresh processes (a quarter of them armed again, their points
rotated the same way) until it completes, and the database is checked against what the
killed processes acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import tempfile
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from reliability._harness import Figure, Report, at_least, equal
from reliability._postgres import on_postgres
from reliability._sweep_workload import CHARGES, NODES, graph_values, run_job
from zincir import decode_record
from zincir.contract._codec import record_with_input
from zincir.store._content import record_with_identity
from zincir.testing import (
    CRASH_POINTS,
    arm_crash_point,
    count_crash_points,
    crash_census,
    disarm_crash_points,
)

ORDER = 1
TITLE = "Kill-point sweep: SIGKILL at every named crash point"
StoreFor = Callable[[int], "str | None"]
"""Where lane ``n`` keeps its store: None for a SQLite file in the sweep's folder."""
_RESUMES = 6  # processes a job may take after its first kill before it counts as stuck
_REARM = 0.25  # the share of resumes armed to be killed again


@dataclass(frozen=True)
class Spec:
    """One process of a job: the job's files and, when armed, where it kills itself."""

    job: str
    point: str | None = None
    nth: int = 1


@dataclass
class Tally:
    """What the sweep counted at one crash point (or in all)."""

    kills: int = 0
    survived: int = 0
    lost: int = 0
    mismatched: int = 0
    repeated: int = 0
    gaps: int = 0
    broken: int = 0
    stuck: int = 0
    reexecuted: int = 0
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Verdict:
    """One finished job checked against its database, its ledger and its acknowledgements."""

    completed: bool = False
    lost: int = 0
    mismatched: int = 0
    repeated: int = 0
    gaps: int = 0
    integrity: bool = True
    reexecuted: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.completed
            and self.integrity
            and not (self.lost or self.mismatched or self.repeated or self.gaps)
        )


class Lane:
    """The files of one lane of jobs: a store (a SQLite file unless ``db`` is a PostgreSQL
    URL), a ledger and an ack file."""

    def __init__(self, root: Path, number: int, db: str | None = None) -> None:
        self.db = db or str(root / f"lane{number}.db")
        self.ledger = str(root / f"lane{number}-ledger.db")
        self.acks = str(root / f"lane{number}-acks.jsonl")
        self.errors = str(root / f"lane{number}-errors.txt")


def _child(lane: Lane, spec: Spec) -> int:
    """The body of a forked process: run the job, armed or not; its exit code."""
    try:
        if spec.point is not None:
            arm_crash_point(spec.point, spec.nth)
        else:
            disarm_crash_points()
        asyncio.run(run_job(lane.db, lane.ledger, lane.acks, spec.job))
        return 0
    except BaseException as error:
        with open(lane.errors, "a", encoding="utf-8") as out:
            out.write(json.dumps({"job": spec.job, "error": type(error).__name__}) + "\n")
            out.write(json.dumps({"trace": traceback.format_exc()}) + "\n")
        return 1


def _fork(lane: Lane, spec: Spec) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(lane, spec)
        finally:
            os._exit(code)
    return pid


def _counted(lane: Lane, job: str, out: Path, point: str | None) -> None:
    """Run ``job`` in a forked process counting crash-point hits (killed at ``point``'s
    first hit when given); the counts land in ``out``."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if point is None:
                count_crash_points()
            else:
                arm_crash_point(point)
            asyncio.run(run_job(lane.db, lane.ledger, lane.acks, job))
            out.write_text(json.dumps(crash_census()))
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def census(root: Path, store: StoreFor) -> tuple[dict[str, int], dict[str, int]]:
    """How often a job reaches each crash point: uninterrupted, and when resumed after a
    kill (a resume also passes the ResumeWorker's claim)."""
    lane = Lane(root, 999, store(999))
    first, resumed = root / "census-first.json", root / "census-resumed.json"
    _counted(lane, "census-a", first, None)
    _counted(lane, "census-b", root / "unused.json", "step.body_done")
    _counted(lane, "census-b", resumed, None)
    if not first.exists() or not resumed.exists():
        raise RuntimeError(f"the census jobs failed: {Path(lane.errors).read_text()}")
    return json.loads(first.read_text()), json.loads(resumed.read_text())


@contextmanager
def _reading(path: str) -> Iterator[apsw.Connection]:
    conn = apsw.Connection(path)
    try:
        yield conn
    finally:
        conn.close()


class _Rows:
    """Read-only queries on a job's store: a SQLite file, or a PostgreSQL URL."""

    def __init__(self, db: str) -> None:
        self.postgres = db.startswith("postgresql://")
        self._db = db

    def __enter__(self) -> _Rows:
        if self.postgres:
            import psycopg

            self._pg = psycopg.connect(self._db, autocommit=True)
        else:
            self._sqlite = apsw.Connection(self._db)
        return self

    def __exit__(self, *exc: object) -> None:
        (self._pg if self.postgres else self._sqlite).close()

    def all(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        if self.postgres:
            return list(self._pg.execute(query.replace("?", "%s"), params).fetchall())
        return list(self._sqlite.execute(query, params).fetchall())

    def integrity(self) -> bool:
        """SQLite's integrity_check (PostgreSQL has no equivalent to run here: True)."""
        return self.postgres or self.all("PRAGMA integrity_check") == [("ok",)]


@dataclass
class Stored:
    """What a job's database holds, read once for the checks."""

    integrity: bool
    status: dict[str, str]
    gaps: int
    steps: dict[str, object]
    operation: str | None
    checkpoints: dict[int, str]
    tool_results: list[str]
    graph: list[str] | None = None


def _gapless(rows: _Rows, run_id: str) -> bool:
    seqs = [
        seq for (seq,) in rows.all("SELECT seq FROM events WHERE run_id = ? ORDER BY seq", run_id)
    ]
    last = rows.all("SELECT last_seq FROM agent_runs WHERE id = ?", run_id)
    return seqs == list(range(1, len(seqs) + 1)) and last == [(len(seqs),)]


def _whole_record(row: tuple[Any, ...]) -> str:
    """A stored record with the identity, digest and input its row's columns keep put back
    (as ``Store.get_operation`` composes it)."""
    record, input_json, run_id, step_id, sequence, kind, handler_id, digest = row
    identity = (str(run_id), str(step_id), int(sequence), str(kind), str(handler_id), str(digest))
    return record_with_input(record_with_identity(str(record), identity), str(input_json))


def read_stored(db: str, job: str) -> Stored:
    """The job's runs, step results, operation record, checkpoints and tool results."""
    wf, ag = f"wf-{job}", f"ag-{job}"
    with _Rows(db) as rows:
        operation = rows.all(
            "SELECT record, input_json, run_id, step_id, sequence, kind, handler_id, "
            "input_digest FROM operations WHERE run_id = ? AND step_id = 'ledger.op' "
            "AND status = 'completed'",
            wf,
        )
        return Stored(
            integrity=rows.integrity(),
            status=dict(rows.all("SELECT id, status FROM agent_runs WHERE id IN (?, ?)", wf, ag)),
            gaps=sum(not _gapless(rows, run) for run in (wf, ag)),
            steps={
                name: json.loads(result)
                for name, result in rows.all(
                    "SELECT name, result FROM steps WHERE run_id = ? AND status = 'completed'", wf
                )
            },
            operation=_whole_record(operation[0]) if operation else None,
            checkpoints=dict(rows.all("SELECT id, status FROM checkpoints WHERE run_id = ?", wf)),
            tool_results=[
                str(payload)
                for (payload,) in rows.all(
                    "SELECT payload FROM events WHERE run_id = ? AND type = 'tool_result'", ag
                )
            ],
        )


def _acks(lane: Lane, job: str) -> list[dict[str, Any]]:
    runs = {f"wf-{job}", f"ag-{job}", f"lg-{job}"}
    with open(lane.acks, encoding="utf-8") as lines:
        return [ack for line in lines if (ack := json.loads(line))["run"] in runs]


def _present(stored: Stored, ack: dict[str, Any]) -> bool:
    """Whether the write an acknowledgement reported is in the database as reported."""
    kind, key, value = ack["kind"], str(ack["key"]), ack["value"]
    if kind == "step":
        return key in stored.steps and stored.steps[key] == value
    if kind == "operation":
        return stored.operation is not None and decode_record(stored.operation) == decode_record(
            value
        )
    if kind == "checkpoint":
        return stored.checkpoints.get(int(key)) == ("accepted" if value else "rejected")
    if kind == "graph":
        return stored.graph == value
    return stored.status.get(str(ack["run"])) == "completed"  # complete, agent


def _covered(ack: dict[str, Any]) -> set[str]:
    """The ledger keys whose effects an acknowledgement reported done."""
    run = str(ack["run"])
    if ack["kind"] == "step":
        return {f"{run}/{ack['key']}"}
    if ack["kind"] == "operation":
        return {str(ack["key"])}
    if ack["kind"] == "agent":
        return {f"{run}/c{n}" for n in CHARGES}
    if ack["kind"] == "graph":
        return {f"{run}/{node}" for node in NODES}
    return set()


def _disagreements(stored: Stored, effects: dict[str, str], job: str) -> int:
    """Records whose value is not the one the ledger applied for their key."""
    wf, ag = f"wf-{job}", f"ag-{job}"
    wrong = sum(stored.steps[name] != effects.get(f"{wf}/{name}") for name in stored.steps)
    if stored.operation is not None:
        record = decode_record(stored.operation)
        output = json.loads(getattr(record.outcome, "output_json", "null"))
        applied = effects.get(record.invocation.stable_key())
        wrong += not isinstance(output, dict) or output.get("value") != applied
    values = {effects.get(f"{ag}/c{n}") for n in CHARGES}
    wrong += sum(not any(v and v in payload for v in values) for payload in stored.tool_results)
    if stored.graph is not None:
        wrong += stored.graph != [effects.get(f"lg-{job}/{node}") for node in NODES]
    return wrong


def read_graph(lane: Lane, job: str) -> list[str] | None:
    """The job's finished graph values (None: not finished), read in a forked process: the
    saver starts threads, which this forking process must not have."""
    out = Path(lane.errors).with_name(f"graph-{os.getpid()}.json")
    out.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out.write_text(json.dumps(asyncio.run(graph_values(lane.db, f"lg-{job}"))))
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)
    values: list[str] | None = json.loads(out.read_text()) if out.exists() else None
    return values


def verify(lane: Lane, job: str, graph: list[str] | None = None) -> Verdict:
    """Check a finished job: runs completed, acknowledged writes present, the log gapless,
    records agreeing with the ledger, nothing acknowledged run again, the file intact.
    ``graph`` is the graph's final values when the caller read them (else forked here)."""
    pattern = (f"%-{job}/%",)
    with _reading(lane.ledger) as ledger:
        effects = dict(ledger.execute("SELECT key, value FROM effects WHERE key LIKE ?", pattern))
        calls = list(ledger.execute("SELECT key, at FROM calls WHERE key LIKE ?", pattern))
    stored = read_stored(lane.db, job)
    stored.graph = graph if graph is not None else read_graph(lane, job)
    verdict = Verdict(
        completed=stored.status == {f"wf-{job}": "completed", f"ag-{job}": "completed"}
        and stored.graph is not None,
        integrity=stored.integrity,
        gaps=stored.gaps,
        mismatched=_disagreements(stored, effects, job),
    )
    for ack in _acks(lane, job):
        verdict.lost += not _present(stored, ack)
        covered = _covered(ack)
        verdict.repeated += sum(key in covered and at > ack["at"] for key, at in calls)
    verdict.reexecuted = len(calls) - len({key for key, _ in calls})
    return verdict


def _rotation(choices: list[tuple[str, int]], rng: random.Random) -> Iterator[tuple[str, int]]:
    """The choices in a shuffled order, again and again: every point is killed at as often
    as any other, so a point that only a resume reaches (a worker's claim) is not left to
    chance (a point an armed resume finished without reaching is owed to the next one)."""
    order = list(choices)
    while True:
        rng.shuffle(order)
        yield from order


def _lane(
    lane: Lane,
    jobs: list[str],
    choices: tuple[list[tuple[str, int]], list[tuple[str, int]]],
    rng: random.Random,
    tallies: dict[str, Tally],
) -> Generator[Spec, int, None]:
    """Run ``jobs`` one after another in ``lane``: yield each process to fork, receive its
    exit status, verify each job once it completed. ``tallies[""]`` counts jobs; the other
    keys count kills at each point (a job's first kill and the kills of its resumes)."""
    total = tallies[""]
    firsts, rearms = _rotation(choices[0], rng), _rotation(choices[1], rng)
    owed: list[tuple[str, int]] = []  # rearmed points a resume finished without reaching
    for job in jobs:
        point, nth = next(firsts)
        status = yield Spec(job, point, rng.randint(1, nth))
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            total.errors["armed point not reached"] += 1
            continue
        killed_at = [point] if code == -signal.SIGKILL else []
        if not killed_at:
            total.errors["error"] += 1
        total.kills += bool(killed_at)
        finished = False
        for _ in range(_RESUMES):
            if rng.random() < _REARM:
                again, again_nth = owed.pop() if owed else next(rearms)
            else:
                again, again_nth = None, 1
            status = yield Spec(job, again, rng.randint(1, again_nth))
            code = os.waitstatus_to_exitcode(status)
            if code == 0:
                if again is not None:  # a resume need not pass it (a takeover without a
                    owed.append((again, again_nth))  # worker's claim): the next armed one
                finished = True
                break
            if code == -signal.SIGKILL and again is not None:
                killed_at.append(again)
            else:
                total.errors["resume error"] += 1
        if not finished:
            total.stuck += 1
            continue
        verdict = verify(lane, job)
        for killer in killed_at:
            tallies[killer].kills += 1
            tallies[killer].survived += verdict.ok
        total.survived += bool(killed_at) and verdict.ok
        total.lost += verdict.lost
        total.mismatched += verdict.mismatched
        total.repeated += verdict.repeated
        total.gaps += verdict.gaps
        total.broken += not verdict.integrity
        total.reexecuted += verdict.reexecuted


def sweep(
    jobs: int, lanes: int, seed: int, root: Path, store: StoreFor
) -> tuple[dict[str, Tally], Counter[str]]:
    """Run ``jobs`` killed jobs over ``lanes`` concurrent lanes; the tallies per point."""
    first, resumed = census(root, store)
    choices = (
        [(point, count) for point, count in sorted(first.items()) if count > 0],
        [(point, count) for point, count in sorted(resumed.items()) if count > 0],
    )
    hits = Counter(first) + Counter(resumed)
    rng = random.Random(seed)
    tallies: dict[str, Tally] = defaultdict(Tally)
    ids = [f"j{n:05d}" for n in range(jobs)]
    running: dict[int, tuple[Lane, Generator[Spec, int, None]]] = {}
    for number in range(lanes):
        lane = Lane(root, number, store(number))
        generator = _lane(lane, ids[number::lanes], choices, random.Random(rng.random()), tallies)
        try:
            spec = next(generator)
        except StopIteration:
            continue
        running[_fork(lane, spec)] = (lane, generator)
    while running:
        pid, status = os.waitpid(-1, 0)
        if pid not in running:
            continue
        lane, generator = running.pop(pid)
        try:
            spec = generator.send(status)
        except StopIteration:
            continue
        running[_fork(lane, spec)] = (lane, generator)
    return dict(tallies), hits


def _errors_seen(root: Path, lanes: int) -> list[str]:
    """The first few errors the lanes' processes wrote (their exception names)."""
    lines = []
    for number in range(lanes):
        path = root / f"lane{number}-errors.txt"
        if path.exists():
            lines += [line for line in path.read_text().splitlines() if '"error"' in line]
    return lines[:4]


def _judged(
    tallies: dict[str, Tally], hits: Counter[str], jobs: int, short: bool, backend: str
) -> tuple[list[Figure], list[str]]:
    """The figures and notes of one backend's sweep."""
    total = tallies.get("", Tally())
    reached = {point for point, count in hits.items() if count > 0}
    killed_at = {point for point, tally in tallies.items() if point and tally.kills}
    on = f" ({backend})"
    figures: list[Figure] = [
        at_least("jobs killed" + on, total.kills, jobs * 0.75),
        equal("killed jobs completed, every check passed" + on, total.survived, total.kills),
        equal("acknowledged writes lost" + on, total.lost, 0),
        equal("records disagreeing with the external ledger" + on, total.mismatched, 0),
        equal("acknowledged work run again" + on, total.repeated, 0),
        equal("runs with a seq gap" + on, total.gaps, 0),
        equal(f"jobs not complete after {_RESUMES} resumes" + on, total.stuck, 0),
        equal("crash points a job reaches" + on, len(reached), len(CRASH_POINTS)),
    ]
    if backend == "SQLite":
        figures.insert(6, equal("integrity_check failures" + on, total.broken, 0))
    if not short:
        figures.append(equal("crash points killed at" + on, len(killed_at), len(reached)))
    figures += [
        Figure(
            f"`{point}`: kills survived{on}",
            f"{tallies[point].survived} / {tallies[point].kills}",
            "all",
            tallies[point].survived == tallies[point].kills,
        )
        for point in sorted(killed_at)
    ]
    unreached = ", ".join(sorted(set(CRASH_POINTS) - reached)) or "none"
    notes = [
        f"{backend}: bodies run again after a kill, inside the at-least-once window between "
        f"a body and its record: {total.reexecuted:,}; none after its acknowledgement. Crash "
        f"points no job reaches: {unreached}."
    ]
    if total.errors:
        ended = ", ".join(f"{name} {count}" for name, count in sorted(total.errors.items()))
        notes.append(f"{backend}: processes that ended other than by their kill: {ended}.")
    return figures, notes


def _swept(
    jobs: int, lanes: int, short: bool, backend: str, store: StoreFor
) -> tuple[list[Figure], list[str]]:
    root = Path(tempfile.mkdtemp(prefix="zincir-sweep-"))
    try:
        tallies, hits = sweep(jobs, lanes=lanes, seed=20261130, root=root, store=store)
        figures, notes = _judged(tallies, hits, jobs, short, backend)
        notes += [f"{backend}: error seen: {line[:200]}" for line in _errors_seen(root, lanes)]
        return figures, notes
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _on_postgres(jobs: int, lanes: int, short: bool) -> tuple[list[Figure], list[str]]:
    """The sweep on a throwaway PostgreSQL server (a schema per lane), or why it did not run."""

    def sweep_there(server: Any) -> tuple[list[Figure], list[str]]:
        urls = {n: server.new_schema_url(f"sweep_{n}") for n in (*range(lanes), 999)}
        return _swept(jobs, lanes, short, "PostgreSQL", urls.get)

    outcome = on_postgres(sweep_there)
    return ([], [outcome]) if isinstance(outcome, str) else outcome


def run(short: bool) -> Report:
    jobs, pg_jobs, lanes = (20, 8, 2) if short else (1000, 200, 2)
    figures, notes = _swept(jobs, lanes, short, "SQLite", lambda _: None)
    pg_figures, pg_notes = _on_postgres(pg_jobs, lanes, short)
    notes = [
        f"{jobs:,} jobs on SQLite and {pg_jobs:,} on PostgreSQL, over {lanes} concurrent "
        "lanes each. Each job's first process is killed on a random hit of a point taken in "
        "turn from a shuffled rotation of every point a first process reaches; a quarter of "
        "its resumes are killed again, their points rotated the same way. PostgreSQL has no "
        "integrity_check.",
        *notes,
        *pg_notes,
    ]
    return Report("crash_sweep", TITLE, figures + pg_figures, notes, short=short)
