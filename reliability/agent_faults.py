"""Agent faults: the ordinary faults of a long horizon, injected into durable agent runs.

Every run is a weather agent (``_procs/fault_agent.py``: a lookup tool, a report tool) on
``zincir.agent.Runner`` with default settings, except a 60-s lease (long, so a restart that
waited for a dead owner's lease would show), on ``OpenAIChatModel`` and the real ``openai``
SDK with ``max_retries=0`` (only zincir's retries count), against a scripted
chat-completions server on loopback (``_chat_server.py``). Each run meets one fault:

- malformed tool arguments (JSON cut short) in the model's first answer;
- a tool that raises (``ValueError``) on the first call;
- a provider outage of 1-60 s from the second model request on: 503s, or the connection
  refused (the run's port closed for that long);
- 429s with ``Retry-After``;
- SIGKILL of the agent process inside the report tool, or inside the second model request
  (the server holds it), then a new process started at once (``runner.resume`` or
  ``runner.run`` with the same run id).

Per fault it counts the runs completed and the finished model requests asked again: the
server's answered (200) requests of a run against the run's stored model-request records.
Restart time is from SIGKILL to the new process holding the run (its lease token in the
run's row). Runs of one backend run concurrently; the killed ones two at a time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from reliability._chat_server import ChatServer, Plan, prompt_for
from reliability._harness import Figure, Report, at_least, at_most, equal
from reliability._postgres import on_postgres
from reliability._procs import Child, percentile
from reliability._procs.fault_agent import LEASE_TTL, build_agent

ORDER = 11
TITLE = "Agent faults: ordinary faults in durable agent runs on default settings"

TTL = LEASE_TTL.total_seconds()
RESTART_LIMIT = 10.0
"""What a restart after SIGKILL may take, in seconds: a new process's start, its imports and
the takeover; waiting out the dead owner's lease would take the TTL (60 s)."""
RUN_TIMEOUT = 900.0
"""A run that has not completed by then counts as not completed."""

KINDS = {
    "malformed": "malformed tool arguments",
    "raising": "a tool raises",
    "outage": "503 outage, 1-60 s",
    "refused": "connection refused, 1-60 s",
    "rate_limited": "429 with Retry-After",
    "kill_tool": "SIGKILL inside a tool, restart",
    "kill_model": "SIGKILL inside a model request, restart",
}
KILLED = ("kill_tool", "kill_model")

# Each backend's runs: (kind, a parameter per run): outage seconds, (429s, Retry-After),
# or the restart's call. Full counts: 100 runs a backend, two outages of 60 s each.
_OUTAGES = [1, 2, 3, 5, 8, 13, 20, 30, 1, 2, 3, 5, 8, 13, 60]
_REFUSALS = [1, 2, 3, 5, 8, 13, 20, 30, 45, 60]
_LIMITS = [(1, 1.0), (2, 1.0), (1, 2.0), (3, 1.0), (1, 3.0)] * 3
_RESTARTS = ["resume", "run"] * 5
FULL: dict[str, list[Any]] = {
    "malformed": [None] * 20,
    "raising": [None] * 20,
    "outage": _OUTAGES,
    "refused": _REFUSALS,
    "rate_limited": _LIMITS,
    "kill_tool": _RESTARTS,
    "kill_model": _RESTARTS,
}
SHORT_SQLITE: dict[str, list[Any]] = {
    "malformed": [None],
    "raising": [None],
    "outage": [1],
    "refused": [2],
    "rate_limited": [(1, 1.0)],
    "kill_tool": ["resume", "run"],
    "kill_model": ["resume"],
}
SHORT_POSTGRES: dict[str, list[Any]] = {"kill_tool": ["run"]}
KILL_LANES = 2


@dataclass
class Outcome:
    """One run: its fault, whether it completed, its answered and stored model requests."""

    run_id: str
    kind: str
    backend: str
    completed: bool = False
    error: str | None = None
    answered: int = 0
    stored: int = 0
    restart: float | None = None
    saw_tool_error: bool = False
    asked_again_after_malformed: bool = False
    early_retries: int = 0
    earliest_retry: float | None = None
    outage: float = 0.0
    after_outage: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def repeated(self) -> int:
        return max(0, self.answered - self.stored)


def run(short: bool) -> Report:
    """Inject every fault on SQLite and on PostgreSQL; hold the counts to their targets."""
    outcomes: list[Outcome] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="zincir-agent-faults-") as folder:
        db = str(Path(folder) / "faults.db")
        outcomes += asyncio.run(_campaign(db, SHORT_SQLITE if short else FULL, "SQLite"))

    def there(server: Any) -> list[Outcome]:
        url = server.new_schema_url("agent_faults")
        return asyncio.run(_campaign(url, SHORT_POSTGRES if short else FULL, "PostgreSQL"))

    found = on_postgres(there)
    if isinstance(found, str):
        notes.append(found)
    else:
        outcomes += found
    figures = _figures(outcomes, short)
    return Report("agent_faults", TITLE, figures, notes + _notes(outcomes), short=short)


def _figures(outcomes: list[Outcome], short: bool) -> list[Figure]:
    planned = sum(len(v) for v in SHORT_SQLITE.values()) + sum(
        len(v) for v in SHORT_POSTGRES.values()
    )
    control = [o for o in outcomes if o.kind == "control"]
    outcomes = [o for o in outcomes if o.kind != "control"]
    figures = [at_least("runs in all", len(outcomes), planned if short else 200)]
    for kind, label in KINDS.items():
        mine = [o for o in outcomes if o.kind == kind]
        figures.append(equal(f"{label}: runs completed", sum(o.completed for o in mine), len(mine)))
        figures.append(
            equal(f"{label}: finished model requests repeated", sum(o.repeated for o in mine), 0)
        )
    raising = [o for o in outcomes if o.kind == "raising"]
    malformed = [o for o in outcomes if o.kind == "malformed"]
    limited = [o for o in outcomes if o.kind == "rate_limited"]
    figures += [
        equal(
            "raising tools whose error reached the model",
            sum(o.saw_tool_error for o in raising),
            len(raising),
        ),
        equal(
            "malformed arguments answered by a new model request",
            sum(o.asked_again_after_malformed for o in malformed),
            len(malformed),
        ),
        equal("429s retried before their Retry-After", sum(o.early_retries for o in limited), 0),
    ]
    figures.append(
        equal(
            "control: a response killed before its record, counted as repeated",
            sum(o.repeated for o in control if o.completed),
            1,
        )
    )
    outages = [o.outage for o in outcomes if o.kind in ("outage", "refused") and o.completed]
    figures.append(
        at_least("longest outage waited out (s)", max(outages, default=0.0), 1 if short else 60)
    )
    for backend in ("SQLite", "PostgreSQL"):
        restarts = [o.restart for o in outcomes if o.backend == backend and o.restart is not None]
        killed = [o for o in outcomes if o.backend == backend and o.kind in KILLED]
        if not killed:
            continue
        figures.append(equal(f"{backend}: restarts timed", len(restarts), len(killed)))
        figures.append(
            at_most(
                f"{backend}: restart after SIGKILL, median (s)",
                round(percentile(restarts, 0.5), 2),
                RESTART_LIMIT,
            )
        )
        figures.append(
            at_most(
                f"{backend}: restart after SIGKILL, max (s)",
                round(max(restarts, default=float("inf")), 2),
                RESTART_LIMIT,
            )
        )
    return figures


def _notes(outcomes: list[Outcome]) -> list[str]:
    control = [o for o in outcomes if o.kind == "control"]
    outcomes = [o for o in outcomes if o.kind != "control"]
    by_backend = {
        backend: sum(o.backend == backend for o in outcomes) for backend in ("SQLite", "PostgreSQL")
    }
    notes = [
        f"{by_backend['SQLite']} runs on SQLite, {by_backend['PostgreSQL']} on PostgreSQL, "
        "each on `Runner(store, agents, lease_ttl=60 s)` with every other setting at its "
        "default; the `openai` SDK's own retries are off (`max_retries=0`), so every retry "
        "the server saw is zincir's.",
        f"Lease TTL {TTL:.0f} s: a restart that waited for the dead owner's lease would take "
        f"{TTL:.0f} s or more; the target is {RESTART_LIMIT:.0f} s from the SIGKILL to the new "
        "process (started at once) holding the run, its interpreter start and imports included.",
        "A finished model request is one the server answered 200; each run's answered requests "
        "are counted against its stored model-request records (held requests, refused "
        "connections, 503s and 429s are not answered). The control run checks the count: "
        "killed at `operation.handled` (a response arrived, its record not yet stored), "
        "its restart must ask that request again, and the count must show that one repeat"
        + "".join(
            f" (it showed {o.repeated}; answered {o.answered}, stored {o.stored})." for o in control
        ),
    ]
    for backend in ("SQLite", "PostgreSQL"):
        restarts = sorted(
            o.restart for o in outcomes if o.backend == backend and o.restart is not None
        )
        if restarts:
            notes.append(
                f"{backend}: {len(restarts)} restarts after SIGKILL, median "
                f"{percentile(restarts, 0.5):.2f} s, max {restarts[-1]:.2f} s, min "
                f"{restarts[0]:.2f} s (lease TTL {TTL:.0f} s)."
            )
    for kind in ("outage", "refused"):
        waits = [o.after_outage for o in outcomes if o.kind == kind and o.after_outage is not None]
        if waits:
            notes.append(
                f"{KINDS[kind]}: from the outage's end to the run's next answered model request "
                f"median {percentile(waits, 0.5):.1f} s, max {max(waits):.1f} s (zincir's retry "
                "delays), over "
                f"{sum(o.outage for o in outcomes if o.kind == kind):,.0f} s of outages."
            )
    early = [o for o in outcomes if o.kind == "rate_limited" and o.early_retries]
    if early:
        soonest = min(o.earliest_retry or 0.0 for o in early)
        notes.append(
            f"429s retried before their Retry-After: {sum(o.early_retries for o in early)} in "
            f"{len(early)} runs, the soonest {soonest * 1000:.0f} ms after its 429."
        )
    shown: set[tuple[str, str]] = set()
    for o in outcomes:  # the first run missed of each fault on each backend
        if (o.completed and not o.repeated) or (o.backend, o.kind) in shown:
            continue
        shown.add((o.backend, o.kind))
        notes.append(
            f"Missed: {o.backend} {o.run_id} ({KINDS[o.kind]}): completed={o.completed}, "
            f"answered {o.answered}, stored {o.stored}; {(o.error or '')[:300]}"
        )
    return notes


# -- one backend ------------------------------------------------------------------------------


async def _campaign(db: str, counts: dict[str, list[Any]], backend: str) -> list[Outcome]:
    """Every run of ``counts`` on ``db``: in-process runs concurrently, killed runs in lanes."""
    import zincir
    from zincir.agent import Runner

    server = ChatServer()
    store = zincir.open_store(db)  # migrated before any child opens it
    outcomes: list[Outcome] = []
    try:
        tag = "s" if backend == "SQLite" else "p"
        agents = {"weather": build_agent("weather", server.base_url())}
        inline: list[tuple[Outcome, Any, str]] = []
        killed: list[tuple[Outcome, str, str]] = []
        for kind, params in counts.items():
            for index, param in enumerate(params):
                run_id = f"{tag}-{kind.replace('_', '-')}-{index}"
                city = ("Oslo", "Lima", "Pune", "Nuuk", "Kyiv")[index % 5]
                outcome = Outcome(run_id, kind, backend)
                outcomes.append(outcome)
                if kind in KILLED:
                    killed.append((outcome, city, param))
                    continue
                plan = _plan(kind, param, city, outcome)
                server.plan(run_id, plan)
                name = "weather"
                if plan.refuse:
                    name = f"weather-{run_id}"
                    agents[name] = build_agent(name, server.base_url(run_id))
                inline.append((outcome, agents[name], city))
        runner = Runner(store, list(agents.values()), lease_ttl=LEASE_TTL)

        async def one(outcome: Outcome, agent: Any, city: str) -> None:
            try:
                result = await asyncio.wait_for(
                    runner.run(agent, prompt_for(outcome.run_id, city), run_id=outcome.run_id),
                    RUN_TIMEOUT,
                )
                outcome.completed = result.output == f"Report filed for {city}."
                if not outcome.completed:
                    outcome.error = f"output {result.output!r}"
            except Exception as error:  # counted, and shown in the notes
                outcome.error = f"{type(error).__name__}: {error}"

        queue = list(killed)

        async def lane() -> None:
            while queue:
                outcome, city, restart = queue.pop(0)
                await _killed_run(server, db, outcome, city, restart)

        control = Outcome(f"{tag}-control", "control", backend)
        if backend == "SQLite":
            await _control(server, db, control)
        await asyncio.gather(
            *(one(*entry) for entry in inline), *(lane() for _ in range(KILL_LANES))
        )
        await _count(server, db, [*outcomes, control])
        if backend == "SQLite":
            outcomes.append(control)
    finally:
        await store.close()
        server.close()
    return outcomes


def _plan(kind: str, param: Any, city: str, outcome: Outcome) -> Plan:
    if kind == "malformed":
        return Plan(city, malformed=True)
    if kind == "raising":
        return Plan(city, raising=True)
    if kind in ("outage", "refused"):
        outcome.outage = float(param)
        return Plan(city, outage=float(param), refuse=kind == "refused")
    limits, retry_after = param
    return Plan(city, rate_limits=limits, retry_after=retry_after)


async def _killed_run(server: ChatServer, db: str, outcome: Outcome, city: str, how: str) -> None:
    """Start the run in a process, SIGKILL it inside the report tool or the held model
    request, start a new process at once (``how``: resume or run) and time its takeover."""
    loop = asyncio.get_running_loop()
    held = asyncio.Event()
    in_model = outcome.kind == "kill_model"

    def on_hold() -> None:  # called from the server's thread
        loop.call_soon_threadsafe(held.set)

    plan = Plan(city, hold=in_model, on_hold=on_hold)
    server.plan(outcome.run_id, plan)
    url = server.base_url()
    first = await Child.start(
        "fault_agent", db, outcome.run_id, url, city, "run", *([] if in_model else ["--hang"])
    )
    second: Child | None = None
    try:
        await first.expect("started", timeout=60)
        if in_model:
            await asyncio.wait_for(held.wait(), 60)
        else:
            await first.expect("in-tool", timeout=60)
        token = (await asyncio.to_thread(_lease, db, outcome.run_id))[0]
        killed_at = time.time()
        os.kill(first.pid, signal.SIGKILL)
        await first.process.wait()
        second = await Child.start("fault_agent", db, outcome.run_id, url, city, how)
        plan.release()
        outcome.restart = await asyncio.to_thread(_takeover, db, outcome.run_id, token, killed_at)
        code = await second.finish(timeout=RUN_TIMEOUT)
        outcome.completed = code == 0 and f"completed Report filed for {city}." in second.lines
        if not outcome.completed:
            outcome.error = f"restart exited {code}: {(await second.stderr())[-300:]}"
    except Exception as error:  # counted, and shown in the notes
        outcome.error = f"{type(error).__name__}: {error}"
    finally:
        plan.release()
        await first.close()
        if second is not None:
            await second.close()


async def _control(server: ChatServer, db: str, outcome: Outcome) -> None:
    """The counter's own check: a process killed after a model response arrived but before
    its record was stored (``operation.handled``) must make the restart ask that request
    again, and the count must see exactly that one repeat."""
    server.plan(outcome.run_id, Plan("Oslo"))
    url = server.base_url()
    for options in (["--crash-at", "operation.handled:1"], []):
        mode = "resume" if not options else "run"
        child = await Child.start("fault_agent", db, outcome.run_id, url, "Oslo", mode, *options)
        try:
            code = await child.finish(timeout=RUN_TIMEOUT)
        finally:
            await child.close()
    outcome.completed = code == 0 and "completed Report filed for Oslo." in child.lines


def _takeover(db: str, run_id: str, token: int, killed_at: float) -> float | None:
    """Seconds from ``killed_at`` until the run's lease token moved past ``token`` (polled
    every 5 ms; the stored lease expiry minus the TTL when that is earlier); None if the
    run was not taken within the TTL and a half."""
    deadline = time.monotonic() + 1.5 * TTL
    while time.monotonic() < deadline:
        now_token, expires = _lease(db, run_id)
        if now_token > token:
            seen = time.time()
            if expires is not None:
                seen = min(seen, _epoch(expires) - TTL)
            return max(seen - killed_at, 0.0)
        time.sleep(0.005)
    return None


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    from zincir._time import from_db

    return from_db(str(value)).timestamp()


async def _count(server: ChatServer, db: str, outcomes: list[Outcome]) -> None:
    """Fill each outcome's answered and stored model requests and its fault's evidence."""
    stored = await asyncio.to_thread(_stored_requests, db)
    for outcome in outcomes:
        served = server.requests(outcome.run_id)
        outcome.answered = sum(s.status == 200 for s in served)
        outcome.stored = stored.get(outcome.run_id, 0)
        outcome.saw_tool_error = any(s.saw_tool_error for s in served)
        outcome.asked_again_after_malformed = any(s.turn >= 1 for s in served)
        plan = server.plans.get(outcome.run_id)
        if plan is not None and plan.rate_limits:
            for before, after in zip(served, served[1:], strict=False):
                waited = after.at - before.at
                if before.status == 429 and waited < plan.retry_after - 0.05:
                    outcome.early_retries += 1
                    outcome.earliest_retry = min(outcome.earliest_retry or waited, waited)
        if plan is not None and plan.outage_started is not None:
            ended = plan.outage_started + plan.outage
            answered = [s.at for s in served if s.turn == 1 and s.status == 200]
            if answered:
                outcome.after_outage = max(answered[0] - ended, 0.0)


# -- reading the store ------------------------------------------------------------------------

_STORED = (
    "SELECT run_id, COUNT(*) FROM operations WHERE step_id = 'model.request' "
    "AND status = 'completed' AND outcome = 'success' GROUP BY run_id"
)


def _stored_requests(db: str) -> dict[str, int]:
    return {str(run_id): int(count) for run_id, count in _query(db, _STORED)}


def _lease(db: str, run_id: str) -> tuple[int, Any]:
    rows = _query(db, "SELECT lease_token, lease_expires_at FROM agent_runs WHERE id = ?", run_id)
    return (int(rows[0][0]), rows[0][1]) if rows else (0, None)


def _query(db: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
    from reliability._procs import query

    return query(db, sql, params)
