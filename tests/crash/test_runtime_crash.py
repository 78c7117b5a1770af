"""LocalRuntime across real processes: replay, one handler call per identity, SIGKILL recovery."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import REPO
from tests.crash.leased_runtime_worker import invocation as leased_invocation
from tests.crash.runtime_worker import INVOCATION as LEASELESS_INVOCATION
from tests.helpers import (
    BOTH_BACKENDS,
    WHOLE_RECORD,
    backend_target,
    read_store,
    select,
    whole_record,
)
from zincir import AgentContext
from zincir._time import from_db
from zincir.contract import Invocation, OperationKind, Success, decode_record, encode_record
from zincir.durable import HandlerRegistry, LocalRuntime
from zincir.store import Store

WORKER = REPO / "tests" / "crash" / "runtime_worker.py"
FENCED_WORKER = REPO / "tests" / "crash" / "fenced_runtime_worker.py"
STORM_WORKER = REPO / "tests" / "crash" / "storm_worker.py"
LEASED_WORKER = REPO / "tests" / "crash" / "leased_runtime_worker.py"
KEY = ("crash-run", "tool.call", 0)


@pytest.fixture(params=BOTH_BACKENDS)
def crash_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the test and its worker processes share: a SQLite file or a schema."""
    return backend_target(request, tmp_path)


class Worker:
    """One runtime_worker.py process; its stdout lines are read on a thread."""

    def __init__(
        self, target: str, tmp_path: Path, mode: str, *options: str, argv: list[str] | None = None
    ) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        if argv is None:
            argv = [
                str(WORKER),
                target,
                str(tmp_path / "side.jsonl"),
                mode,
                *options,
            ]
        self.process = subprocess.Popen(
            [sys.executable, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = 30) -> str:
        """The next stdout line starting with ``prefix``."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"worker exited before {prefix!r}: {self.stderr()}")
            if line.startswith(prefix):
                return line

    def record(self) -> str:
        """Wait for the canonical record the worker printed and its clean exit."""
        text = self.expect("record ").removeprefix("record ")
        assert self.process.wait(timeout=30) == 0, self.stderr()
        return text

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL

    def stderr(self) -> str:
        self.process.wait(timeout=30)
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self.pump.join(timeout=30)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def workers(crash_target: str, tmp_path: Path) -> Any:
    started: list[Worker] = []

    def start(mode: str, *options: str) -> Worker:
        worker = Worker(crash_target, tmp_path, mode, *options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


def side_effects(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "side.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def operation(target: str) -> tuple[Any, ...]:
    [row] = select(
        target,
        f"SELECT status, outcome, attempts, {WHOLE_RECORD} FROM operations "
        "WHERE run_id = ? AND step_id = ? AND sequence = ?",
        KEY,
    )
    status, outcome, attempts, *stored = row
    return status, outcome, whole_record(*stored), attempts


def test_a_new_process_replays_the_record_without_the_handler(
    crash_target: str, tmp_path: Path, workers: Any
) -> None:
    first = workers("ok").record()
    assert len(side_effects(tmp_path)) == 1
    assert workers("ok").record() == first
    assert len(side_effects(tmp_path)) == 1
    assert operation(crash_target) == ("completed", "success", first, 1)


def test_two_processes_run_one_identity_once(
    crash_target: str, tmp_path: Path, workers: Any
) -> None:
    """Both start together; the handler outlives claim_ttl, so the claim must be renewed."""
    zincir.open_store(crash_target).close_sync()  # two first opens race on WAL setup
    go = tmp_path / "go"
    options = ("--go", str(go), "--claim-ttl", "0.4", "--sleep", "1.2")
    first, second = workers("ok", *options), workers("ok", *options)
    first.expect("ready")
    second.expect("ready")
    go.touch()
    assert first.record() == second.record()
    assert len(side_effects(tmp_path)) == 1
    assert operation(crash_target)[3] == 1


@pytest.mark.crash
def test_a_handler_killed_inside_leaves_no_record_and_runs_again(
    crash_target: str, tmp_path: Path, workers: Any
) -> None:
    victim = workers("hang", "--claim-ttl", "1.0")
    victim.expect("inside")
    waiter = workers("ok", "--claim-ttl", "1.0", "--go", str(tmp_path / "go"))
    waiter.expect("ready")
    (tmp_path / "go").touch()
    time.sleep(0.5)  # the waiter polls the victim's live, renewed claim
    assert len(side_effects(tmp_path)) == 1
    victim.kill()
    status, outcome, record, attempts = operation(crash_target)
    assert (status, outcome, record, attempts) == ("claimed", None, None, 1)

    stored = waiter.record()  # taken over once the dead owner's claim expired
    assert operation(crash_target) == ("completed", "success", stored, 2)
    calls = side_effects(tmp_path)
    assert len(calls) == 2, "at least once: the interrupted handler ran again"
    assert calls[0]["pid"] != calls[1]["pid"]
    assert {(c["key"], c["digest"], c["input"]) for c in calls} == {
        ("crash-run/tool.call/0", decode_record(stored).input_digest, '{"order":"A1","amount":12}'),
    }
    assert workers("ok").record() == stored
    assert len(side_effects(tmp_path)) == 2


@pytest.mark.crash
def test_a_kill_between_retries_stores_no_failure(
    crash_target: str, tmp_path: Path, workers: Any
) -> None:
    victim = workers("fail-then-hang", "--claim-ttl", "0.5")
    victim.expect("failing")
    time.sleep(0.2)  # inside the 60 s retry delay
    victim.kill()
    assert operation(crash_target) == ("claimed", None, None, 1)
    stored = workers("ok", "--claim-ttl", "0.5").record()
    assert isinstance(decode_record(stored).outcome, Success)
    assert operation(crash_target) == ("completed", "success", stored, 2)
    assert len(side_effects(tmp_path)) == 2


@pytest.mark.crash
def test_a_kill_after_execute_returned_keeps_the_record(
    crash_target: str, tmp_path: Path, workers: Any
) -> None:
    victim = workers("ok", "--hold")
    stored = victim.expect("record ").removeprefix("record ")
    victim.expect("held")
    victim.kill()
    assert operation(crash_target) == ("completed", "success", stored, 1)
    assert workers("ok").record() == stored
    assert len(side_effects(tmp_path)) == 1


# -- a process whose run was taken over -------------------------------------------------------


@pytest.mark.parametrize("new_owner", ["holds", "finishes"])
async def test_a_process_taken_over_mid_operation_writes_nothing_to_the_run(
    crash_target: str, tmp_path: Path, new_owner: str
) -> None:
    """The old owner's handler finishes after a force recovery by this (other) process: its
    execute raises and it stores neither the record nor operation_completed."""
    db, run_id = crash_target, "fenced-run"
    zincir.open_store(db).close_sync()
    old = Worker(db, tmp_path, "", argv=[str(FENCED_WORKER), db, run_id, str(tmp_path / "release")])
    store = zincir.open_store(db)
    try:
        await asyncio.to_thread(old.expect, "inside")
        ctx = await AgentContext.force_recover(store, run_id)
        registry = HandlerRegistry()
        handler_calls: list[Invocation] = []

        def handler(invocation: Invocation, request: object) -> object:
            handler_calls.append(invocation)
            return {"by": "new owner"}

        registry.register(OperationKind.TOOL_CALL, "fenced-tools", handler)
        runtime = LocalRuntime(store, registry, claim_ttl=0.3, poll_interval=0.02)
        invocation = Invocation(
            run_id, "tool.call", 0, OperationKind.TOOL_CALL, "fenced-tools", '{"order":"A1"}'
        )
        if new_owner == "finishes":  # the old claim, of a superseded token, is taken over
            record = await asyncio.wait_for(runtime.execute(invocation), 20)
            await ctx.complete()
        before = await store.list_events(run_id)
        (tmp_path / "release").touch()
        answer = await asyncio.to_thread(old.expect, "")
        assert answer == ("error FencedOut" if new_owner == "holds" else "error RunTerminal"), (
            old.stderr()
        )
        assert old.process.wait(timeout=30) == 0, old.stderr()
        assert await store.list_events(run_id) == before
        if new_owner == "holds":
            [(status, outcome, stored, attempts)] = select(
                db, "SELECT status, outcome, record, attempts FROM operations"
            )
            assert (status, outcome, stored, attempts) == ("claimed", None, None, 1)
            record = await runtime.execute(invocation)  # at least once: it runs again
            await ctx.complete()
        assert record.outcome == Success('{"by":"new owner"}') and len(handler_calls) == 1
        assert [
            (status, whole_record(*stored), attempts)
            for status, attempts, *stored in select(
                db, f"SELECT status, attempts, {WHOLE_RECORD} FROM operations"
            )
        ] == [("completed", encode_record(record), 2)]
        events = await store.list_events(run_id)
        assert [e.type for e in events].count("operation_completed") == 1
        assert [e.type for e in events][-2:] == ["operation_completed", "state_transition"]
    finally:
        await store.close()
        old.close()


@pytest.mark.crash
async def test_a_takeover_storm_leaves_no_write_of_an_older_token(crash_target: str) -> None:
    """Four processes take one run from each other for seconds while their runtimes record
    operations: every operation_completed in the log belongs to the owner of that moment."""
    db, run_id = crash_target, "storm"
    store = zincir.open_store(db)
    ctx = await AgentContext.create(store, "storm", run_id=run_id)
    await ctx.close()
    await store.close()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    processes = [
        subprocess.Popen(
            [sys.executable, str(STORM_WORKER), db, run_id, "3"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    rounds = 0
    for process in processes:
        out, err = await asyncio.to_thread(process.communicate, timeout=120)
        assert process.returncode == 0, err
        rounds += int(out.split()[-1])
    runs = await read_store(db, lambda store: store.list_runs())
    assert [run["id"] for run in runs] == [run_id]  # the log read below is the whole log
    log = await read_store(db, lambda store: store.list_events(run_id))
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    owner_of_now, tokens, written = 0, [], 0
    for event in log:
        kind, body = event.type, event.payload
        if kind == "llm_call":
            owner_of_now = int(body["content"].split()[1])
            tokens.append(owner_of_now)
        elif kind == "operation_completed":
            assert body["sequence"] // 100 == owner_of_now, (body, owner_of_now)
            written += 1
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert rounds >= 8 and len(tokens) >= 8 and written > 0
    # Records of fenced executions were never stored: each stored record is its owner's.
    for sequence, status in select(db, "SELECT sequence, status FROM operations"):
        if status == "completed":
            assert sequence // 100 in tokens


# -- a claim made under the run's lease passes to the run's next owner -------------------------


LEASED_RUN = "leased-run"
CLAIM_TTL = 30.0  # the default: a claim-expiry wait would be obvious


def leased_worker(target: str, tmp_path: Path, *options: str) -> Worker:
    argv = [
        str(LEASED_WORKER),
        target,
        str(tmp_path / "side.jsonl"),
        LEASED_RUN,
        "--claim-ttl",
        str(CLAIM_TTL),
        *options,
    ]
    return Worker(target, tmp_path, "", argv=argv)


class Calls:
    """A handler that remembers its invocations and returns ``answer``."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls: list[Invocation] = []

    def __call__(self, invocation: Invocation, request: object) -> object:
        self.calls.append(invocation)
        return self.answer


def runtime_on(
    store: Store, handler_id: str, handler: Calls, claim_ttl: float = CLAIM_TTL
) -> LocalRuntime:
    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, handler_id, handler)
    return LocalRuntime(store, registry, claim_ttl=claim_ttl, poll_interval=0.02)


def leased_claim(db: str) -> tuple[Any, ...]:
    [row] = select(
        db,
        "SELECT status, claim_lease_token, claim_expires_at, attempts FROM operations "
        "WHERE run_id = ?",
        (LEASED_RUN,),
    )
    return row


async def recover_when_free(store: Store, run_id: str) -> AgentContext:
    """AgentContext.recover, retried until the dead owner's lease has expired."""
    while True:
        try:
            return await AgentContext.recover(store, run_id)
        except zincir.LeaseHeld:
            await asyncio.sleep(0.05)


@pytest.mark.crash
@pytest.mark.parametrize("recovery", ["force_recover", "lease_expired"])
async def test_a_killed_owners_claim_passes_to_the_runs_new_owner_at_once(
    crash_target: str, tmp_path: Path, recovery: str
) -> None:
    """SIGKILL inside the handler with claim_ttl=30 s: the process that recovers the run runs
    the handler at once, without waiting for the dead claim's expiry."""
    db = crash_target
    zincir.open_store(db).close_sync()
    lease_ttl = "1.0" if recovery == "lease_expired" else "60"
    victim = leased_worker(db, tmp_path, "--lease-ttl", lease_ttl)
    store = zincir.open_store(db)
    try:
        await asyncio.to_thread(victim.expect, "inside")
        victim.kill()
        status, token, expires, attempts = leased_claim(db)
        assert (status, token, attempts) == ("claimed", 1, 1)  # under the victim's lease
        assert from_db(expires) - datetime.now(UTC) > timedelta(seconds=20)  # live by expiry
        if recovery == "force_recover":
            ctx = await AgentContext.force_recover(store, LEASED_RUN)
        else:
            ctx = await asyncio.wait_for(recover_when_free(store, LEASED_RUN), 10)
        assert ctx.lease_token == 2
        handler = Calls({"by": "new owner"})
        runtime = runtime_on(store, "leased-tools", handler)
        started = time.monotonic()
        record = await asyncio.wait_for(runtime.execute(leased_invocation(LEASED_RUN)), 10)
        assert time.monotonic() - started < 5, "it waited for the dead claim's expiry"
        await ctx.complete()
    finally:
        await store.close()
        victim.close()
    assert record.outcome == Success('{"by":"new owner"}') and len(handler.calls) == 1
    assert [
        (status, whole_record(*stored), attempts, token)
        for status, attempts, token, *stored in select(
            db, f"SELECT status, attempts, claim_lease_token, {WHOLE_RECORD} FROM operations"
        )
    ] == [("completed", encode_record(record), 2, 2)]
    assert len(side_effects(tmp_path)) == 1  # the victim's call; at least once
    runs = await read_store(db, lambda store: store.list_runs())
    assert [run["id"] for run in runs] == [LEASED_RUN]  # its log is the whole log
    log = await read_store(db, lambda store: store.list_events(LEASED_RUN))
    payloads = [event.payload for event in log if event.type == "operation_completed"]
    assert [(p["sequence"], p["outcome"], p["attempts"]) for p in payloads] == [(0, "success", 2)]


@pytest.mark.crash
async def test_a_live_claim_of_the_current_lease_in_another_process_is_waited_for(
    crash_target: str, tmp_path: Path
) -> None:
    """While the run's owner is alive its claim is honoured past claim_ttl (renewed); killed
    with its lease still current, its claim is taken over only once it expires."""
    db = crash_target
    zincir.open_store(db).close_sync()
    victim = leased_worker(db, tmp_path, "--lease-ttl", "60", "--claim-ttl", "1.5")
    store = zincir.open_store(db)
    try:
        await asyncio.to_thread(victim.expect, "inside")
        handler = Calls({"by": "waiter"})
        runtime = runtime_on(store, "leased-tools", handler, claim_ttl=1.5)
        waiting = asyncio.ensure_future(runtime.execute(leased_invocation(LEASED_RUN)))
        await asyncio.sleep(2.0)
        assert not waiting.done() and handler.calls == []  # the owner's live claim
        assert leased_claim(db)[:2] == ("claimed", 1)  # made under the current token
        victim.kill()
        killed = time.monotonic()
        record = await asyncio.wait_for(waiting, 20)
        assert time.monotonic() - killed >= 0.9  # it waited for the claim's expiry
    finally:
        await store.close()
        victim.close()
    assert handler.calls and record.outcome == Success('{"by":"waiter"}')
    assert select(db, "SELECT status, attempts FROM operations") == [("completed", 2)]


@pytest.mark.crash
async def test_a_claim_made_without_a_lease_still_waits_for_its_expiry(
    crash_target: str, tmp_path: Path
) -> None:
    """A leaseless process's claim carries no token: the run's new owner waits for it."""
    db, run_id = crash_target, KEY[0]
    store = zincir.open_store(db)
    try:
        await (await AgentContext.create(store, "leaseless claim", run_id=run_id)).close()
        victim = Worker(db, tmp_path, "hang", "--claim-ttl", "1.5")
        try:
            await asyncio.to_thread(victim.expect, "inside")
            [(token, attempts)] = select(db, "SELECT claim_lease_token, attempts FROM operations")
            assert (token, attempts) == (None, 1)
            victim.kill()
        finally:
            victim.close()
        killed = time.monotonic()
        ctx = await AgentContext.recover(store, run_id)
        handler = Calls({"by": "new owner"})
        runtime = runtime_on(store, "crash-tools", handler, claim_ttl=1.5)
        record = await asyncio.wait_for(runtime.execute(LEASELESS_INVOCATION), 20)
        assert time.monotonic() - killed >= 0.9  # it waited for the claim's expiry
        await ctx.complete()
    finally:
        await store.close()
    assert record.outcome == Success('{"by":"new owner"}') and len(handler.calls) == 1
    assert select(db, "SELECT status, attempts, claim_lease_token FROM operations") == [
        ("completed", 2, ctx.lease_token)
    ]
    runs = await read_store(db, lambda store: store.list_runs())
    assert [run["id"] for run in runs] == [run_id]  # its log is the whole log
    log = await read_store(db, lambda store: store.list_events(run_id))
    [event] = [e for e in log if e.type == "operation_completed"]
    assert event.payload["attempts"] == 2
