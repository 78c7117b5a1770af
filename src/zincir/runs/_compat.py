"""``zincir check-compat``: replay every unfinished run's log against the current code,
without running or writing anything, and say which runs the code would diverge on.

Each pending or running run is handed to the handler (the one a ResumeWorker would run) on
an AgentContext whose store is a :class:`~zincir.runs._dry_store.DryStore`: recorded steps
and operations return their stored results, and the first thing the log does not hold stops
the replay before it happens. A run is

- ``divergent`` when the code asks for a step or operation the run never recorded while
  recorded work remains that it has not asked for (a renamed step, one added in the
  middle: ``VersionDivergence``), or an operation's input changed (``InputDrift``);
- ``compatible`` otherwise: the replay reached new work, a wait or the run's end; the
  recorded work it never asked for is listed (a removed step), not fatal;
- ``error`` when the handler raised anything else, or did not stop within the timeout.

The database is never written. A SQLite file is copied (SQLite's backup API through a
read-only connection) and the replay reads the copy, which is deleted afterwards. A
PostgreSQL schema is opened like any zincir process would (one at the schema version of
this code: check-compat never migrates) and every write is refused by the DryStore before
it reaches the server.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, cast

from .._errors import InputDrift, RunNotFound, StoreError, VersionDivergence, ZincirSignal
from .._validate import MAX_SEQUENCE, printable
from ..store import Lease, RunRecord, Store, open_store
from ..store._readonly import ReadOnlyView, open_read_only
from ..store.sqlite import ReadOnlyDatabase
from ._context import AgentContext
from ._dry_store import DryStore, ReplayStopped
from ._worker import Handler

__all__ = ["CompatReport", "check_compat", "format_reports"]

Verdict = Literal["compatible", "divergent", "error"]
_OWNER = "zincir-check-compat"
_LEASE_TTL = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class CompatReport:
    """How the current code replays one unfinished run."""

    run_id: str
    name: str
    app_version: str | None
    verdict: Verdict
    detail: str
    """Where the replay stopped (compatible), the divergence, or the error."""
    recorded: int
    """Recorded steps and operations in the run's log."""
    replayed: int
    """How many of them the code asked for before the replay stopped."""
    unreplayed: list[str] = field(default_factory=list)
    """The recorded work the code did not ask for, in log order."""
    position: int | None = None
    """For a divergence: the position of the first recorded item not replayed."""


async def check_compat(
    database: str,
    handler: Handler,
    *,
    run_ids: Sequence[str] | None = None,
    timeout: float = 60.0,
) -> list[CompatReport]:
    """Replay every pending or running run of ``database`` (or those of ``run_ids`` that
    are; RunNotFound for an id it lacks) against ``handler`` in the dry mode; one report per
    run, oldest update first."""
    view = open_read_only(database)
    view.check()
    async with _private_store(view, database) as (inner, reads):
        runs = _unfinished(reads, run_ids)
        return [await _check_run(inner, reads, view.path, run, handler, timeout) for run in runs]


def _unfinished(view: ReadOnlyView, run_ids: Sequence[str] | None) -> list[RunRecord]:
    with view.snapshot() as reader:
        if run_ids is not None:
            runs = []
            for run_id in run_ids:
                run = reader.get_run(run_id)
                if run is None:
                    raise RunNotFound(f"no run {run_id!r} in {view.path}", run_id=run_id)
                runs.append(run)
        else:
            runs = [
                run
                for status in ("pending", "running")
                for run in reader.list_runs(status, MAX_SEQUENCE)
            ]
    live = [run for run in runs if run["status"] in ("pending", "running")]
    return sorted(live, key=lambda run: (run["updated_at"], run["id"]))


@asynccontextmanager
async def _private_store(
    view: ReadOnlyView, database: str
) -> AsyncIterator[tuple[Store, ReadOnlyView]]:
    """A store to replay from that cannot change ``database``, and the view reading the
    same data: a private copy of a SQLite file, or the PostgreSQL schema itself (refused
    when it would need a migration)."""
    if isinstance(view, ReadOnlyDatabase):
        with tempfile.TemporaryDirectory(prefix="zincir-check-compat-") as folder:
            copy = os.path.join(folder, "copy.db")
            view.copy_to(copy)
            store = open_store(copy)
            try:
                yield store, open_read_only(copy)
            finally:
                await store.close()
        return
    from ..store.postgres._readonly import ReadOnlyPostgres

    assert isinstance(view, ReadOnlyPostgres)
    applied = view.schema_version()
    if applied != view.known_version:
        raise StoreError(
            f"{view.path} has schema version {applied} and this zincir's is "
            f"{view.known_version}; check-compat never migrates a database: run it with the "
            "zincir that wrote the schema, or on a migrated copy"
        )
    store = open_store(database)
    try:
        yield store, view
    finally:
        await store.close()


async def _check_run(
    inner: Store,
    reads: ReadOnlyView,
    path: str,
    run: RunRecord,
    handler: Handler,
    timeout: float,
) -> CompatReport:
    run_id = run["id"]
    with reads.snapshot() as reader:
        steps = {
            row["name"]: row["result"]
            for row in reader.steps(run_id, MAX_SEQUENCE)
            if row["status"] == "completed"
        }
    lease = Lease(run_id, _OWNER, max(int(run["lease_token"]), 1) + 1, _LEASE_TTL)
    dry = DryStore(inner, lease, await inner.list_events(run_id), steps, path)
    ctx = AgentContext.adopt(cast(Store, dry), lease)
    replay = ctx.replay

    def report(verdict: Verdict, detail: str, position: int | None = None) -> CompatReport:
        unreplayed = replay.unreplayed()
        return CompatReport(
            run_id,
            run["name"],
            run["app_version"],
            verdict,
            detail,
            len(replay.recorded),
            len(replay.recorded) - len(unreplayed),
            unreplayed,
            position,
        )

    try:
        await replay.load()
        await asyncio.wait_for(_invoke(handler, ctx), timeout)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as raised:
        found = _first(raised)
        if isinstance(found, VersionDivergence):
            return report(
                "divergent",
                f"at #{found.position}: the run recorded {found.recorded}, the code asks "
                f"for {found.attempted}",
                found.position,
            )
        if isinstance(found, InputDrift):
            return report("divergent", f"input drift: {found.detail}")
        if isinstance(found, ReplayStopped):
            where = "new work" if found.new_work else "a write the log does not hold"
            return report("compatible", f"stops at {where}: {found.what}")
        if isinstance(found, ZincirSignal):
            return report("compatible", f"suspends ({type(found).__name__})")
        if isinstance(found, TimeoutError):
            return report("error", f"the handler did not stop within {timeout:g} s")
        return report("error", printable(f"{type(found).__name__}: {found}"))
    finally:
        await ctx.release()
    return report("compatible", "the handler returned")


async def _invoke(handler: Handler, ctx: AgentContext) -> None:
    outcome = handler(ctx)
    if inspect.isawaitable(outcome):
        await outcome


def _first(raised: BaseException) -> BaseException:
    """The error that decides a run's verdict, out of exception groups (a TaskGroup's):
    a divergence first, then a stop of the replay, then anything else."""
    if not isinstance(raised, BaseExceptionGroup):
        return raised
    leaves = list(_leaves(raised))
    for kinds in ((VersionDivergence, InputDrift), (ReplayStopped,)):
        for leaf in leaves:
            if isinstance(leaf, kinds):
                return leaf
    return leaves[0]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for item in group.exceptions:
        found.extend(_leaves(item) if isinstance(item, BaseExceptionGroup) else [item])
    return found


def format_reports(reports: Sequence[CompatReport]) -> str:
    """One block per run (its verdict line, then what it never replayed) and a summary."""
    if not reports:
        return "no unfinished runs: nothing to check"
    width = max(len(report.run_id) for report in reports)
    lines: list[str] = []
    for report in reports:
        version = report.app_version or "-"
        lines.append(
            f"{report.run_id:<{width}}  {report.verdict:<10}  version {version}  "
            f"replayed {report.replayed}/{report.recorded}  {report.detail}"
        )
        if report.unreplayed:
            lines.append(f"{'':<{width}}  recorded, never replayed: {', '.join(report.unreplayed)}")
    counts = {
        verdict: sum(1 for report in reports if report.verdict == verdict)
        for verdict in ("compatible", "divergent", "error")
    }
    lines.append(
        f"{len(reports)} unfinished run(s): "
        + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
    )
    return "\n".join(lines)
