"""Forks, on every backend: a new run holding its source's history before a seq, taken over
at once and continued live from there, while the source stays as it was."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import zincir
from tests.helpers import select
from zincir import (
    AgentContext,
    HandlerRegistry,
    InvalidInput,
    Invocation,
    LocalRuntime,
    OperationKind,
    RunExists,
    RunNotFound,
    ToolCall,
    Verification,
    WorkflowContext,
    compact_run,
    fork_run,
    prune_runs,
)
from zincir.cli import main
from zincir.store import RunOrigin, Store
from zincir.store._lifecycle import RUN_TABLES
from zincir.store._readonly import open_read_only
from zincir.testing import FakeClock

DAY = 24 * 3600.0
LONG = "a tool's long answer " * 100  # over 1 KiB: stored once as content


def _rows_of(target: str, run_id: str) -> dict[str, str]:
    """A digest of every row run ``run_id`` owns, per table."""
    found = {}
    for table, column in (*RUN_TABLES, ("agent_runs", "id")):
        rows = select(target, f"SELECT * FROM {table} WHERE {column} = ?", (run_id,))
        if rows:
            found[table] = hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest()
    return found


def _counts(target: str) -> dict[str, int]:
    tables = ("agent_runs", "events", "archived_events", "run_origins", "content_refs")
    return {t: int(select(target, f"SELECT COUNT(*) FROM {t}")[0][0]) for t in tables}


async def _log(store: Store, run_id: str, before: int | None = None) -> list[tuple[Any, ...]]:
    return [
        (e.seq, e.type, e.payload)
        for e in await store.list_events(run_id)
        if before is None or e.seq < before
    ]


async def _seq_of(store: Store, run_id: str, kind: str, **fields: Any) -> int:
    for event in await store.list_events(run_id):
        if event.type == kind and all(event.payload.get(k) == v for k, v in fields.items()):
            return event.seq
    raise AssertionError(f"no {kind} {fields} in {run_id}")


def _steps(calls: Counter[str]) -> list[tuple[str, Callable[[], str]]]:
    def body(name: str) -> Callable[[], str]:
        def run() -> str:
            calls[name] += 1
            return f"{name}-result"

        return run

    return [(name, body(name)) for name in "abcde"]


async def _run_workflow(store: Store, run_id: str, calls: Counter[str]) -> list[Any]:
    async with await WorkflowContext.open(store, run_id) as wf:
        results = [await wf.step(name, fn) for name, fn in _steps(calls)]
        await wf.complete(results)
    return results


async def test_a_workflow_fork_replays_the_steps_before_the_point(
    store: Store, store_url: str
) -> None:
    calls: Counter[str] = Counter()
    results = await _run_workflow(store, "wf", calls)
    at = await _seq_of(store, "wf", "step_completed", name="c")
    before = _rows_of(store_url, "wf")

    new_id = await fork_run(store, "wf", at_seq=at)
    assert re.fullmatch(r"wf-fork-[0-9a-f]{8}", new_id)
    assert _rows_of(store_url, "wf") == before  # the source is only read
    fork = await store.get_run(new_id)
    assert fork is not None
    assert (fork["status"], fork["lease_owner"], fork["last_seq"]) == ("running", None, at - 1)
    assert await _log(store, new_id) == await _log(store, "wf", before=at)

    calls.clear()
    assert await _run_workflow(store, new_id, calls) == results  # taken over at once
    assert calls == Counter({"c": 1, "d": 1, "e": 1})  # a and b replayed, not run
    assert _rows_of(store_url, "wf") == before
    done = await store.get_run(new_id)
    assert done is not None and done["status"] == "completed"


async def _agent_run(store: Store, run_id: str) -> AgentContext:
    """A run with a checkpoint between its turns, a long tool result and an open intent."""
    ctx = await AgentContext.create(store, "agent", run_id=run_id, config={"model": "m"})
    await ctx.record_response("first", [ToolCall("c1", "lookup", {"q": 1})])
    await ctx.record_tool_result("c1", LONG)
    await ctx.checkpoint({"completed": ["one"]}, lambda c: Verification(True))
    await ctx.record_response("second", [ToolCall("c2", "lookup", {"q": 2})])
    await ctx.record_response("third", [ToolCall("c3", "slow", {"q": 3})])
    await ctx.record_tool_result("c2", {"ok": 2})
    await ctx.checkpoint({"completed": ["two"]}, lambda c: Verification(True))
    await ctx.record_response("fourth", [])
    return ctx


async def _expected_state(store: Store, run_id: str, at: int) -> tuple[Any, ...]:
    """What ``state()`` of a fork at ``at`` must say: the latest checkpoint accepted before
    the point and the events after it, read from the source's log."""
    log = await store.list_events(run_id)
    accepted = [e for e in log if e.seq < at and e.type == "checkpoint_accepted"]
    through = accepted[-1].seq if accepted else 0
    events = [(e.seq, e.type, e.payload) for e in log if through < e.seq < at]
    return through, events


async def _state_of(ctx: AgentContext) -> tuple[Any, ...]:
    state = await ctx.state()
    through = 0 if state.checkpoint is None else state.checkpoint.decided_seq
    return through, [(e.seq, e.type, e.payload) for e in state.events]


async def test_an_agent_fork_holds_the_state_of_the_prefix(store: Store, store_url: str) -> None:
    source = await _agent_run(store, "agent-src")
    await source.complete({"done": True})
    before = _rows_of(store_url, "agent-src")
    at = await _seq_of(store, "agent-src", "tool_result", id="c2")  # after c3's intent
    new_id = await fork_run(store, "agent-src", at_seq=at, run_id="agent-fork")
    assert new_id == "agent-fork"

    ctx = await AgentContext.recover(store, "agent-fork")  # nobody owns it: taken at once
    assert await _state_of(ctx) == await _expected_state(store, "agent-src", at)
    assert [call.id for call in await ctx.pending_tools()] == ["c2", "c3"]
    checkpoint = (await ctx.state()).checkpoint
    assert checkpoint is not None and checkpoint.candidate.completed == ("one",)
    seq = await ctx.record_tool_result("c2", {"ok": "fork"})
    assert seq == at  # the takeover logged nothing: the log continues from the point
    assert _rows_of(store_url, "agent-src") == before
    fork, run = await store.get_run("agent-fork"), await store.get_run("agent-src")
    assert fork is not None and run is not None
    assert (
        (fork["name"], fork["config"]) == (run["name"], run["config"]) == ("agent", '{"model":"m"}')
    )


async def test_a_compacted_source_forks_with_its_archived_events(
    store: Store, store_url: str
) -> None:
    source = await _agent_run(store, "compacted")
    log = await _log(store, "compacted")
    report = await compact_run(store, "compacted")
    assert report.archived > 0
    last = log[-1][0]
    for at in (2, report.through_seq - 1, report.through_seq + 1, last + 1):
        fork_id = f"compacted-at-{at}"
        await fork_run(store, "compacted", at_seq=at, run_id=fork_id)
        assert await _log(store, fork_id) == [entry for entry in log if entry[0] < at]
        ctx = await AgentContext.recover(store, fork_id)
        assert await _state_of(ctx) == await _expected_state(store, "compacted", at)
        expected_open = {call for call in ("c1", "c2", "c3") if _open_at(log, call, at)}
        assert {call.id for call in await ctx.pending_tools()} == expected_open
        await ctx.close()
    # Forked at the end, the fork's archive is the source's: compacted alike.
    archived = "SELECT seq FROM archived_events WHERE run_id = ? ORDER BY seq"
    assert select(store_url, archived, (f"compacted-at-{last + 1}",)) == select(
        store_url, archived, ("compacted",)
    )
    assert (await compact_run(store, f"compacted-at-{last + 1}")).archived == 0
    await source.close()


def _open_at(log: list[tuple[Any, ...]], call: str, at: int) -> bool:
    intent = any(t == "tool_call" and p.get("id") == call for s, t, p in log if s < at)
    result = any(t == "tool_result" and p.get("id") == call for s, t, p in log if s < at)
    return intent and not result


async def test_two_forks_of_one_run_and_their_origins(store: Store, store_url: str) -> None:
    ctx = await _agent_run(store, "twice")
    await fork_run(store, "twice", at_seq=3, run_id="twice-a")
    await fork_run(store, "twice", at_seq=5, run_id="twice-b")
    origins = await store.forks_of("twice")
    assert [(o.run_id, o.source_run_id, o.at_seq, o.kind) for o in origins] == [
        ("twice-a", "twice", 3, "fork"),
        ("twice-b", "twice", 5, "fork"),
    ]
    assert await store.run_origin("twice-b") == origins[1]
    assert await store.run_origin("twice") is None
    assert isinstance(origins[0], RunOrigin) and origins[0].created_at.tzinfo is not None
    assert await _log(store, "twice-a") == await _log(store, "twice", before=3)
    assert await _log(store, "twice-b") == await _log(store, "twice", before=5)
    view = open_read_only(store_url)
    with view.snapshot() as reader:
        assert reader.forks_of("twice") == origins
        assert reader.run_origin("twice-a") == origins[0]
        assert reader.run_origin("twice") is None
    await ctx.close()


async def test_a_live_run_forks_from_its_committed_log(store: Store, store_url: str) -> None:
    owner = await _agent_run(store, "live")  # its owner holds the lease
    last = (await store.list_events("live"))[-1].seq
    await fork_run(store, "live", at_seq=last + 1, run_id="live-fork")
    assert await _log(store, "live-fork") == await _log(store, "live")
    # The owner goes on writing (not fenced); the fork is taken over at once.
    await owner.record_tool_result("c3", {"ok": 3})
    fork = await AgentContext.recover(store, "live-fork")
    await fork.record_tool_result("c3", {"ok": "fork"})
    assert (await store.list_events("live"))[-1].payload == (await store.list_events("live-fork"))[
        -1
    ].payload | {"result": {"ok": 3}}
    await owner.complete(None)
    await fork.complete(None)


async def test_bad_input_is_refused_with_nothing_stored(store: Store, store_url: str) -> None:
    ctx = await _agent_run(store, "good")
    await AgentContext.create(store, "agent", run_id="taken")
    last = (await store.list_events("good"))[-1].seq
    before = _counts(store_url)
    with pytest.raises(RunNotFound, match="nobody"):
        await fork_run(store, "nobody", at_seq=1)
    for at in (0, -1, last + 2):
        with pytest.raises(InvalidInput, match=rf"good.*1 to {last + 1}"):
            await fork_run(store, "good", at_seq=at)
    with pytest.raises(InvalidInput):
        await fork_run(store, "good", at_seq="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await fork_run(store, "good", at_seq=2, run_id="")
    with pytest.raises(RunExists, match="taken"):
        await fork_run(store, "good", at_seq=2, run_id="taken")
    with pytest.raises(RunExists):
        await fork_run(store, "good", at_seq=2, run_id="good")
    assert _counts(store_url) == before
    await ctx.close()


def _pieces_missing(target: str, run_id: str) -> tuple[int, list[str]]:
    """How many of the run's events have pieces, and the pieces the database lacks (read
    from its tables: a process's content cache would hide a missing one)."""
    rows = select(target, "SELECT payload_pieces FROM events WHERE run_id = ?", (run_id,))
    digests = [digest for (pieces,) in rows if pieces for _, digest in json.loads(pieces)]
    stored = {hash_ for (hash_,) in select(target, "SELECT hash FROM content")}
    return sum(1 for (pieces,) in rows if pieces), [d for d in digests if d not in stored]


async def test_prune_of_the_source_keeps_the_forks_content(
    fake_store: Store, clock: FakeClock, store_url: str
) -> None:
    store = fake_store
    source = await _agent_run(store, "src")
    await source.complete({"done": True})
    at = await _seq_of(store, "src", "checkpoint_accepted") + 1
    await fork_run(store, "src", at_seq=at, run_id="src-fork")
    fork_log = await _log(store, "src-fork")
    assert LONG in repr(fork_log)
    clock.advance(40 * DAY)
    report = await prune_runs(store, older_than=timedelta(seconds=DAY))
    assert report.run_ids == ["src"]  # the fork is live: kept
    assert await _log(store, "src-fork") == fork_log
    assert _pieces_missing(store_url, "src-fork") == (1, [])  # its content is intact
    assert await store.run_origin("src-fork") is not None  # its origin names the source
    ctx = await AgentContext.recover(store, "src-fork")
    await ctx.record_response("the fork goes on", [])
    await ctx.complete(None)


async def test_prune_of_a_fork_leaves_its_source(
    fake_store: Store, clock: FakeClock, store_url: str
) -> None:
    store = fake_store
    source = await _agent_run(store, "src")
    at = await _seq_of(store, "src", "checkpoint_accepted") + 1
    await fork_run(store, "src", at_seq=at, run_id="src-fork")
    fork = await AgentContext.recover(store, "src-fork")
    await fork.complete(None)
    before = _rows_of(store_url, "src")
    log = await _log(store, "src")
    clock.advance(40 * DAY)
    report = await prune_runs(store, older_than=timedelta(seconds=DAY))
    assert report.run_ids == ["src-fork"]
    assert _rows_of(store_url, "src-fork") == {}  # its origin row too
    assert _rows_of(store_url, "src") == before and await _log(store, "src") == log
    assert await store.forks_of("src") == []
    await source.complete(None)


def test_cli_runs_fork_at_seq(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")

    async def seed() -> None:
        store = zincir.open_store(db)
        ctx = await _agent_run(store, "cli-src")
        await ctx.complete(None)
        await store.close()

    asyncio.run(seed())

    def invoke(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["runs", "fork", *args, "--db", db])
        return result.exit_code, result.output

    code, output = invoke("cli-src", "--at-seq", "3")
    assert code == 0, output
    assert re.fullmatch(r"cli-src-fork-[0-9a-f]{8}\n", output)
    code, output = invoke("cli-src", "--at-seq", "4", "--new-id", "cli-fork")
    assert (code, output) == (0, "cli-fork\n")
    assert select(
        db, "SELECT source_run_id, at_seq FROM run_origins WHERE run_id = ?", ("cli-fork",)
    ) == [("cli-src", 4)]
    for args, named in (
        (("nobody", "--at-seq", "1"), "nobody"),
        (("cli-src", "--at-seq", "0"), "cli-src"),
        (("cli-src", "--at-seq", "3", "--new-id", "cli-fork"), "cli-fork"),
    ):
        code, output = invoke(*args)
        assert code == 1 and named in output and "Traceback" not in output, output
    code, output = invoke("cli-src")
    assert code == 2 and "--at-seq" in output


def test_the_inspector_links_a_fork_and_its_source(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from tests.inspector.conftest import client_for, seed
    from zincir.inspector._app import run_url

    path = tmp_path / "inspected.db"

    async def fill(store: Store) -> None:
        await _agent_run(store, "origin-run")
        await fork_run(store, "origin-run", at_seq=4, run_id="fork-one")
        await fork_run(store, "origin-run", at_seq=6, run_id="fork-two")

    seed(path, fill)
    client = client_for(path)
    fork_page = client.get(run_url("fork-one"))
    assert fork_page.status_code == 200
    origin = re.search(r'<dd class="origin">(.*?)</dd>', fork_page.text)
    assert origin is not None
    assert (
        f'forked from <a href="{run_url("origin-run")}"><code>origin-run</code></a> at seq 4'
        == (origin.group(1))
    )
    source_page = client.get(run_url("origin-run")).text
    forks = re.search(r'<dd class="forks">(.*?)</dd>', source_page)
    assert forks is not None
    assert re.findall(r'href="([^"]+)"', forks.group(1)) == [
        run_url("fork-one"),
        run_url("fork-two"),
    ]
    assert "at seq 4" in forks.group(1) and "at seq 6" in forks.group(1)
    assert 'class="origin"' not in source_page and 'class="forks"' not in fork_page.text


async def test_a_fork_replays_its_timers_and_receipts_without_waiting(
    fake_store: Store, clock: FakeClock, store_url: str
) -> None:
    store = fake_store
    calls: Counter[str] = Counter()

    def body(name: str, value: int) -> Callable[[], int]:
        def run() -> int:
            calls[name] += 1
            return value

        return run

    async def flow(run_id: str, *, send: bool) -> list[Any]:
        async with await WorkflowContext.open(store, run_id, sleeper=clock.sleep) as wf:
            first = await wf.step("a", body("a", 1))
            await wf.sleep("nap", 3600)
            if send:
                await zincir.send_message(store, run_id, "go", {"n": 1})
            got = await wf.recv("go", timeout=60)
            second = await wf.step("b", body("b", 2))
            await wf.complete([first, got, second])
            return [first, got, second]

    assert await flow("timed", send=True) == [1, {"n": 1}, 2]
    assert clock.slept == [3600]
    at = await _seq_of(store, "timed", "step_completed", name="b")
    before = _rows_of(store_url, "timed")
    await fork_run(store, "timed", at_seq=at, run_id="timed-fork")
    calls.clear()
    assert await flow("timed-fork", send=False) == [1, {"n": 1}, 2]
    assert calls == Counter({"b": 1})
    assert clock.slept == [3600]  # the nap had fired before the point: no new wait
    timers = "SELECT name, wake_at, completed_at FROM timers WHERE run_id = ?"
    assert select(store_url, timers, ("timed-fork",)) == select(store_url, timers, ("timed",))
    assert _rows_of(store_url, "timed") == before


async def test_a_fork_holds_the_records_completed_before_the_point(
    store: Store, store_url: str
) -> None:
    calls: Counter[int] = Counter()

    def answer(invocation: Invocation, request: Any) -> Any:
        calls[invocation.sequence] += 1
        return {"sequence": invocation.sequence, "long": LONG}

    async def execute(run_id: str, sequence: int) -> Any:
        runtime = LocalRuntime(store, HandlerRegistry())
        invocation = Invocation(run_id, "tool.call", sequence, OperationKind.TOOL_CALL, "h", "{}")
        return (await runtime.execute(invocation, inline=answer)).outcome

    source = await AgentContext.create(store, "agent", run_id="ops")
    first, second = await execute("ops", 0), await execute("ops", 1)
    at = await _seq_of(store, "ops", "operation_completed", sequence=1)  # between the two
    await fork_run(store, "ops", at_seq=at, run_id="ops-fork")
    await source.close()
    fork = await AgentContext.recover(store, "ops-fork")
    calls.clear()
    assert await execute("ops-fork", 0) == first  # its record, shared
    assert calls == Counter()
    assert await execute("ops-fork", 1) == second  # completed after the point: runs again
    assert calls == Counter({1: 1})
    await fork.complete(None)
