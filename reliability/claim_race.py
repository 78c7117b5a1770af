"""Claim race: many processes claiming the same expired runs at the same instants.

Racer processes (``_procs/claim_racer.py``) start together and, every round, all claim a
random number of the same few runs as a ResumeWorker does. A round lasts one lease TTL, so
each round's claims land just as the previous round's leases expire, on either side of the
boundary. Holders never renew or release, so a lease granted at ``t`` holds until
``t + TTL``. Each racer prints every grant (run, token, holder, times around the claim);
afterwards the grants are checked against each other and against the runs' logs (each
claim appends ``run_claimed`` with its token and time in the claim's transaction): no
token granted twice, no two grants of one run with overlapping leases, tokens increasing
with time, every grant in the log and every logged claim reported.

On SQLite always; on PostgreSQL at full counts when its binaries are installed (the test
suite runs it on its session server).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import zincir
from reliability._harness import Figure, Report, at_least, equal
from reliability._postgres import on_postgres
from reliability._procs import Child, percentile
from zincir import AgentContext

ORDER = 6
TITLE = "Claim race: many processes, the same expired runs"

PROCESSES = {True: 4, False: 16}
ROUNDS = {True: 200, False: 10_000}
RUNS = 3
TTL = 0.03
"""The lease every grant holds, in seconds (the shortest zincir accepts)."""
PERIOD = TTL
"""A round's length: claims meet the previous round's leases right at their expiry."""


@dataclass(frozen=True)
class Grant:
    """One grant as its holder reported it."""

    run_id: str
    token: int
    holder: str
    before: float
    after: float


@dataclass(frozen=True)
class LoggedClaim:
    """One ``run_claimed`` event: who got which token, at the claim's time."""

    token: int
    worker: str
    at: datetime


def run(short: bool) -> Report:
    """The race on SQLite, and at full counts on a throwaway PostgreSQL server too."""
    processes, rounds = PROCESSES[short], ROUNDS[short]
    with tempfile.TemporaryDirectory(prefix="zincir-claim-race-") as folder:
        report = race(str(Path(folder) / "race.db"), processes, rounds)
    report.short = short
    if short:
        report.notes.append("PostgreSQL: at full counts, and in tests/reliability on its server.")
        return report
    postgres = _on_postgres(processes, rounds)
    if isinstance(postgres, str):
        report.notes.append(postgres)
    else:
        report.figures += [
            Figure(f"{f.name} (PostgreSQL)", f.value, f.target, f.met) for f in postgres.figures
        ]
        report.notes += [f"PostgreSQL: {note}" for note in postgres.notes]
    return report


def race(target: str, processes: int, rounds: int) -> Report:
    """Race ``processes`` racers for ``rounds`` rounds on ``target`` (a SQLite path or a
    postgresql:// URL) and judge the grants."""
    grants, finished, attempts, empty, logs, final = asyncio.run(_race(target, processes, rounds))
    same_token = sum(n - 1 for n in Counter((g.run_id, g.token) for g in grants).values() if n > 1)
    overlaps = out_of_order = 0
    for claims in logs.values():
        ordered = sorted(claims, key=lambda claim: claim.token)
        for earlier, later in zip(ordered, ordered[1:], strict=False):
            overlaps += later.at < earlier.at + timedelta(seconds=TTL)
            out_of_order += later.at < earlier.at
    by_run: dict[str, list[Grant]] = defaultdict(list)
    for grant in grants:
        by_run[grant.run_id].append(grant)
    for run_grants in by_run.values():
        ordered_grants = sorted(run_grants, key=lambda grant: grant.token)
        for earlier_grant, later_grant in zip(ordered_grants, ordered_grants[1:], strict=False):
            out_of_order += later_grant.after < earlier_grant.before
    logged = {(run_id, c.token, c.worker) for run_id, claims in logs.items() for c in claims}
    reported = {(g.run_id, g.token, g.holder) for g in grants}
    last_tokens = {
        run_id: max((c.token for c in claims), default=0) for run_id, claims in logs.items()
    }
    stale = sum(final[run_id] != last_tokens[run_id] for run_id in final)
    latencies = [grant.after - grant.before for grant in grants]
    p50, p99 = (percentile(latencies, q) * 1000 for q in (0.5, 0.99))
    figures = [
        equal("racer processes that finished", finished, processes),
        equal("claims made (processes × rounds)", attempts, processes * rounds),
        at_least("grants", len(grants), rounds),
        equal("double grants (a token twice, or overlapping leases)", same_token + overlaps, 0),
        equal("tokens out of order", out_of_order + stale, 0),
        equal("grants missing from the log", len(reported - logged), 0),
        equal("logged claims no racer reported", len(logged - reported), 0),
    ]
    notes = [
        f"{RUNS} runs, lease TTL {TTL * 1000:.0f} ms, one round per TTL with up to 2 ms of "
        f"jitter; {attempts:,} claims made, {empty:,} of them got nothing; claim time p50 "
        f"{p50:.1f} ms, p99 {p99:.1f} ms.",
        "Grants per run: "
        + ", ".join(f"{run_id} {len(by_run[run_id]):,}" for run_id in sorted(logs))
        + "; grants per racer: "
        + ", ".join(str(n) for _, n in sorted(Counter(g.holder for g in grants).items())),
    ]
    return Report("claim_race", TITLE, figures, notes)


async def _race(
    target: str, processes: int, rounds: int
) -> tuple[list[Grant], int, int, int, dict[str, list[LoggedClaim]], dict[str, int]]:
    """Run the racers; return their grants, how many finished, claims made, empty claims,
    the runs' logged claims and each run's final token."""
    store = zincir.open_store(target)
    try:
        run_ids = [f"race-{index}" for index in range(RUNS)]
        for run_id in run_ids:
            ctx = await AgentContext.create(store, "claim-race", run_id=run_id)
            await ctx.close()  # released: claimable at once
        racers = [
            await Child.start(
                "claim_racer",
                target,
                f"racer-{index}",
                str(rounds),
                str(PERIOD),
                str(TTL),
                str(RUNS),
                str(index),
                stdin=True,
            )
            for index in range(processes)
        ]
        try:
            for racer in racers:
                await racer.expect("ready", timeout=60)
            start = time.time() + 0.2
            for racer in racers:
                await racer.send(f"{start:.6f}")
            codes = await asyncio.gather(
                *(racer.finish(timeout=rounds * PERIOD + 120) for racer in racers)
            )
            for racer, code in zip(racers, codes, strict=True):
                if code != 0:
                    raise RuntimeError(f"racer exited {code}: {await racer.stderr()}")
        finally:
            for racer in racers:
                await racer.close()
        grants: list[Grant] = []
        finished = attempts = empty = 0
        for racer in racers:
            for line in racer.lines:
                words = line.split()
                if words[0] == "grant":
                    run_id, token, holder, before, after = words[1:]
                    grants.append(Grant(run_id, int(token), holder, float(before), float(after)))
                elif words[0] == "done":
                    finished += 1
                    attempts += int(words[1])
                    empty += int(words[2])
        logs = {run_id: await _logged_claims(store, run_id) for run_id in run_ids}
        final = {}
        for run_id in run_ids:
            record = await store.get_run(run_id)
            final[run_id] = -1 if record is None else int(record["lease_token"])
        return grants, finished, attempts, empty, logs, final
    finally:
        await store.close()


async def _logged_claims(store: zincir.store.Store, run_id: str) -> list[LoggedClaim]:
    """The run's ``run_claimed`` events, read through the store (either backend)."""
    return [
        LoggedClaim(
            int(event.payload["lease_token"]), str(event.payload["worker"]), event.created_at
        )
        for event in await store.list_events(run_id)
        if event.type == "run_claimed"
    ]


def _on_postgres(processes: int, rounds: int) -> Report | str:
    """The race on a throwaway PostgreSQL server, or why it could not run."""
    return on_postgres(lambda server: race(server.new_schema_url("claim_race"), processes, rounds))
