"""What SQLite alone charges for a durable step: the raw loop, zincir's schema, a leaner one.

Each is a bare-APSW *stepper* (no zincir code runs), timed after a warm-up and counted in
WAL frames (pages written per step: what an fsync and the checkpoints scale with).

- The raw loop: ``BEGIN IMMEDIATE`` + one ``INSERT`` + ``COMMIT`` per step, the physical
  limit. It runs at least ``RAW_MIN_STEPS`` steps, so that it passes the WAL's automatic
  checkpoint (every 1,000 frames) several times, as the other figures do.
- Today's schema floor: the statements of one ``WorkflowContext.step`` (a claim commit, then
  the result's commit) on zincir's migrated database: the claim row holds only the claim and
  the seq of the step's event, the result is stored once, in that event, and the run's row
  is read for the fence and the last seq, never written per step.
- The lean floor: the prototype that schema was built from, with the same guarantees (the
  claim commits, visible to other processes, before the body runs; the result is an event
  in the run's gapless log; the run's lease is checked inside each transaction): its claim
  row has no start time, its fence is folded into the event's INSERT, and the lease holder
  keeps the next seq (the events' primary key refuses a seq used twice).

At FULL every floor commits its claim without fsync and its result with one, as zincir does.

A captured floor is any zincir workload's own statements: the write connection's statements
(with their bindings and ``PRAGMA synchronous`` switches) recorded while zincir ran them,
then issued again from a bare loop on a copy of the database as it was before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import apsw

import zincir
from zincir.store.sqlite._log import register_functions

RAW_MIN_STEPS = 3000
"""The raw loop's least number of timed steps: three automatic WAL checkpoints."""

FRAME_STEPS = 100
"""Steps per WAL frame count: under the 1,000-frame automatic checkpoint for every floor."""

Stepper = Callable[[int], None]
ResultOf = Callable[[int], Any]


# -- the raw loop ---------------------------------------------------------------------------


def raw_stepper(
    path: str, synchronous: str, result_of: ResultOf
) -> tuple[apsw.Connection, Stepper]:
    """One INSERT + COMMIT per step into a WAL database."""
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, result TEXT)")

    def step(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO steps (result) VALUES (?)", (json.dumps(result_of(i)),))
        conn.execute("COMMIT")

    return conn, step


# -- today's schema -------------------------------------------------------------------------

_HOLDER = (
    "SELECT max(r.last_seq, coalesce((SELECT max(e.seq) FROM events AS e "
    "WHERE e.run_id = r.id), 0)) FROM agent_runs AS r WHERE r.id = ? AND r.lease_owner = ? "
    "AND r.lease_token = ? AND r.status IN ('pending', 'running')"
)


def schema_db(path: str, synchronous: str, runs: int) -> apsw.Connection:
    """A migrated zincir database with ``runs`` leased runs, opened with bare APSW."""
    zincir.open_store(path).close_sync()
    conn = apsw.Connection(path, statementcachesize=256)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    for r in range(runs):
        conn.execute(
            "INSERT INTO agent_runs (id, name, status, lease_owner, lease_token, created_at, "
            "updated_at) VALUES (?, 'floor', 'running', 'owner', 1, 'now', 'now')",
            (f"r{r}",),
        )
    return conn


def claim_sql(conn: apsw.Connection, run: str, name: str) -> None:
    """The claim: one statement, inserted only while the run's lease holds."""
    conn.execute(
        "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, started_at) "
        "SELECT ?1, ?2, 'owner', 1, 'now' WHERE EXISTS (SELECT 1 FROM agent_runs WHERE id = ?1 "
        "AND lease_owner = 'owner' AND lease_token = 1 AND status IN ('pending', 'running')) "
        "ON CONFLICT (run_id, name) DO NOTHING RETURNING 1",
        (run, name),
    ).fetchone()


def finish_sql(conn: apsw.Connection, run: str, name: str, result: str) -> None:
    """The fence (the run's row read, with its last seq), the step's event (which carries
    the result), then the claim's pointer to it."""
    seq = conn.execute(_HOLDER, (run, "owner", 1)).fetchone()[0] + 1
    conn.execute(
        "INSERT INTO events (run_id, seq, type, payload, created_at) "
        "VALUES (?, ?, 'step_completed', ?, 'now')",
        (run, seq, f'{{"name":{json.dumps(name)},"result":{result}}}'),
    )
    conn.execute(
        "UPDATE step_claims SET event_seq = ? WHERE run_id = ? AND name = ? "
        "AND event_seq IS NULL AND claim_owner = 'owner' AND claim_token = 1 RETURNING 1",
        (seq, run, name),
    ).fetchone()


# -- the lean schema ------------------------------------------------------------------------

LEAN_SCHEMA = """
CREATE TABLE lean_steps (
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    claim_owner TEXT NOT NULL,
    claim_token INTEGER NOT NULL,
    event_seq   INTEGER,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
"""

_LEASE_HOLDS = (
    "EXISTS (SELECT 1 FROM agent_runs WHERE id = ? AND lease_owner = 'owner' "
    "AND lease_token = 1 AND status IN ('pending', 'running'))"
)
_LEAN_CLAIM = (
    "INSERT INTO lean_steps (run_id, name, claim_owner, claim_token) "
    f"SELECT ?, ?, 'owner', 1 WHERE {_LEASE_HOLDS} "
    "ON CONFLICT (run_id, name) DO NOTHING RETURNING 1"
)
_LEAN_EVENT = (
    "INSERT INTO events (run_id, seq, type, payload, created_at) "
    f"SELECT ?, ?, 'step_completed', ?, 'now' WHERE {_LEASE_HOLDS} RETURNING 1"
)
_LEAN_POINTER = (
    "UPDATE lean_steps SET event_seq = ? WHERE run_id = ? AND name = ? "
    "AND claim_owner = 'owner' AND claim_token = 1 AND event_seq IS NULL RETURNING 1"
)


def lean_db(path: str, synchronous: str, runs: int) -> apsw.Connection:
    """Today's database (for ``agent_runs`` and ``events``) plus the lean claim table."""
    conn = schema_db(path, synchronous, runs)
    conn.execute(LEAN_SCHEMA)
    return conn


def lean_claim(conn: apsw.Connection, run: str, name: str) -> None:
    """One statement: the claim, inserted only while the run's lease holds."""
    assert conn.execute(_LEAN_CLAIM, (run, name, run)).fetchone() is not None


def lean_finish(conn: apsw.Connection, run: str, name: str, seq: int, result: str) -> None:
    """The result as the step's event at the lease holder's next seq, then its pointer."""
    payload = f'{{"name":{json.dumps(name)},"result":{result}}}'
    assert conn.execute(_LEAN_EVENT, (run, seq, payload, run)).fetchone() is not None
    assert conn.execute(_LEAN_POINTER, (seq, run, name)).fetchone() is not None


# -- steppers over one run or many ----------------------------------------------------------


def _sync(conn: apsw.Connection, full: bool, durable: bool) -> None:
    if full:
        conn.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")


def floor_stepper(
    path: str, synchronous: str, result_of: ResultOf, *, lean: bool, runs: int = 1
) -> tuple[apsw.Connection, Stepper]:
    """Step ``i`` of ``runs`` runs at once on today's schema (or the lean one): every claim in
    one commit, then every result in the next."""
    conn = (lean_db if lean else schema_db)(path, synchronous, runs)
    full = synchronous.upper() == "FULL"
    seqs = [0] * runs

    def step(i: int) -> None:
        name = f"step-{i}"
        _sync(conn, full, durable=False)
        conn.execute("BEGIN IMMEDIATE")
        for r in range(runs):
            (lean_claim if lean else claim_sql)(conn, f"r{r}", name)
        conn.execute("COMMIT")
        _sync(conn, full, durable=True)
        conn.execute("BEGIN IMMEDIATE")
        result = json.dumps(result_of(i))
        for r in range(runs):
            if lean:
                seqs[r] += 1
                lean_finish(conn, f"r{r}", name, seqs[r], result)
            else:
                finish_sql(conn, f"r{r}", name, result)
        conn.execute("COMMIT")

    return conn, step


def warm(step: Stepper, steps: int) -> None:
    """``steps`` untimed steps, named apart from the measured ones (negative numbers)."""
    for i in range(steps):
        step(-1 - i)


def timed_steps(opened: tuple[apsw.Connection, Stepper], n: int, warm_up: int = 50) -> float:
    """Seconds for ``n`` steps after ``warm_up`` untimed ones; closes the connection."""
    conn, step = opened
    try:
        warm(step, warm_up)
        started = time.perf_counter()
        for i in range(n):
            step(i)
        return time.perf_counter() - started
    finally:
        conn.close()


def raw_step_us(path: str, synchronous: str, n: int, result_of: ResultOf) -> float:
    """The raw loop, µs per step (at least RAW_MIN_STEPS timed)."""
    n = max(n, RAW_MIN_STEPS)
    return timed_steps(raw_stepper(path, synchronous, result_of), n) / n * 1e6


def floor_step_us(path: str, synchronous: str, n: int, result_of: ResultOf, *, lean: bool) -> float:
    """One run's steps on today's schema (or the lean one), µs per step."""
    return timed_steps(floor_stepper(path, synchronous, result_of, lean=lean), n) / n * 1e6


def floor_concurrent_steps_per_s(
    path: str, runs: int, steps: int, result_of: ResultOf, *, lean: bool
) -> float:
    """``runs`` runs' steps batched into one commit per phase (FULL), steps per second."""
    opened = floor_stepper(path, "FULL", result_of, lean=lean, runs=runs)
    return runs * steps / timed_steps(opened, steps, warm_up=5)


# -- captured statements -------------------------------------------------------------------

Statement = tuple[str, Any]


class StatementLog:
    """The statements run on one APSW connection while :attr:`recording`, with bindings."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.statements: list[Statement] = []
        self.recording = False
        conn.exec_trace = self._trace

    def _trace(self, cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        if self.recording:
            self.statements.append((sql, bindings))
        return True


def replayed_s(path: str, statements: list[Statement], synchronous: str) -> float:
    """Seconds a bare APSW loop takes to issue ``statements`` on the database at ``path``."""
    conn = apsw.Connection(path, statementcachesize=256)
    try:
        register_functions(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=OFF")
        execute = conn.execute
        started = time.perf_counter()
        for sql, bindings in statements:
            execute(sql, bindings).fetchall()
        return time.perf_counter() - started
    finally:
        conn.close()


# -- WAL frames -----------------------------------------------------------------------------


class WalFrames:
    """Counts the WAL frames written to one database between :meth:`reset` and
    :meth:`count`, through a probe connection of its own."""

    def __init__(self, path: str) -> None:
        self._probe = apsw.Connection(path)

    def _checkpoint(self, mode: str) -> int:
        busy, logged, _ = self._probe.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        if busy:
            raise RuntimeError(f"a {mode} checkpoint was blocked by another connection")
        return int(logged)

    def reset(self) -> None:
        """Empty the log."""
        self._checkpoint("TRUNCATE")

    def count(self) -> int:
        """Frames logged since the reset (valid under the 1,000-frame automatic checkpoint);
        the probe is closed after."""
        logged = self._checkpoint("PASSIVE")
        self._probe.close()
        return logged


def frames_per_step(opened: tuple[apsw.Connection, Stepper], path: str) -> float:
    """WAL frames per step of a stepper, over FRAME_STEPS steps after a warm-up."""
    conn, step = opened
    try:
        warm(step, 20)
        frames = WalFrames(path)
        frames.reset()
        for i in range(FRAME_STEPS):
            step(i)
        return frames.count() / FRAME_STEPS
    finally:
        conn.close()
