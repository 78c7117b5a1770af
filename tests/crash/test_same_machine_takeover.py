"""Same-machine takeover: a live lease whose owner process on this machine died (or whose
pid now belongs to a newer process) is taken over at once, through the fenced takeover;
an owner on another machine, or a live process here, is waited out. Real processes,
killed with SIGKILL, on both backends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import select
from zincir import AgentContext
from zincir.runs._worker import ResumeWorker
from zincir.store import NewEvent, Store
from zincir.store._owner import _process, _this_process
from zincir.workflow import WorkflowContext

pytestmark = pytest.mark.crash

CHILD = REPO / "tests" / "crash" / "owner_child.py"
LEASED_WORKER = REPO / "tests" / "crash" / "leased_runtime_worker.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
HOUR = timedelta(hours=1)


def holds_then_killed(argv: list[str]) -> tuple[str, int]:
    """Start a child that takes a run's 60 s lease, SIGKILL it once it holds it (and reap
    it); its owner id and lease token."""
    child = subprocess.Popen(
        [sys.executable, *argv], env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        line = child.stdout.readline().split()
        assert line[:1] == ["ready"], child.stderr.read() if child.poll() is not None else line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    return line[1], int(line[2])


def killed_owner(db: str, mode: str, run_id: str) -> tuple[str, int]:
    return holds_then_killed([str(CHILD), mode, db, run_id])


def owner_id(
    *, pid: int, start: int | str, boot: str | None = None, host: str | None = None
) -> str:
    """An owner id of this machine's format, with the parts a test chooses."""
    here = _this_process()
    assert here.boot is not None and here.start is not None, "these tests need /proc"
    return (
        f"{here.host}:{pid}:{uuid.uuid4().hex[:12]}:{host or here.host_id}:"
        f"{boot or here.boot}:{start}"
    )


class Sleeper:
    """A live `sleep` process: a pid of this machine that is not the test's."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(["sleep", "300"])
        found = None
        for _ in range(100):
            found = _process(self.process.pid)
            if found is not None:
                break
            time.sleep(0.01)
        assert found is not None
        self.pid, self.start = self.process.pid, found[1]

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


@pytest.fixture
def sleeper() -> Iterator[Sleeper]:
    live = Sleeper()
    yield live
    live.close()


async def held_by(store: Store, run_id: str, owner: str) -> None:
    """A run whose live lease (an hour) is held by ``owner``, however it was built."""
    await store.create_run(run_id, name="job", owner=owner, ttl=HOUR)


# -- AgentContext.recover -----------------------------------------------------------------


async def test_recover_right_after_sigkill_takes_the_run_over_and_fences_the_dead_owner(
    store_target: str,
) -> None:
    db = store_target
    owner, token = killed_owner(db, "agent", "r1")
    store = zincir.open_store(db)
    try:
        started = time.monotonic()
        ctx = await AgentContext.recover(store, "r1", lease_ttl=60)
        elapsed = time.monotonic() - started
        assert ctx.lease_token == token + 1 and ctx.lease.owner != owner
        assert elapsed < 5  # not the 60 s lease
        dead = zincir.store.Lease("r1", owner, token, timedelta(seconds=60))
        with pytest.raises(zincir.FencedOut, match="superseded"):
            await store.append_events(dead, [NewEvent("note", '{"by":"zombie"}')])
        await store.append_events(ctx.lease, [NewEvent("note", '{"by":"heir"}')])
        await ctx.complete()
    finally:
        await store.close()
    notes = [row[0] for row in select(db, "SELECT payload FROM events WHERE type = 'note'")]
    assert [note.replace(" ", "") for note in notes] == ['{"by":"victim"}', '{"by":"heir"}']


async def test_a_process_that_recovered_and_was_killed_is_taken_over_at_once_too(
    store_target: str,
) -> None:
    db = store_target
    _, first = killed_owner(db, "agent", "r2")
    _, second = killed_owner(db, "recover", "r2")  # took over from the first dead owner
    assert second == first + 1
    store = zincir.open_store(db)
    try:
        ctx = await AgentContext.recover(store, "r2")
        assert ctx.lease_token == second + 1
        await ctx.close()
    finally:
        await store.close()


async def test_a_live_process_here_still_holds_its_lease(store_target: str) -> None:
    db = store_target
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "agent", db, "r3"],
        env=ENV,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    store = zincir.open_store(db)
    try:
        assert child.stdout.readline().startswith("ready"), child.stderr.read()
        with pytest.raises(
            zincir.LeaseHeld, match=f"live process on this machine \\(pid {child.pid}"
        ):
            await AgentContext.recover(store, "r3")
        assert await ResumeWorker(store).claim(10) == []
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    try:
        ctx = await AgentContext.recover(store, "r3")  # and once killed, at once
        assert ctx.lease_token == 2
        await ctx.close()
    finally:
        await store.close()


async def test_an_owner_on_another_machine_is_waited_out(store_target: str) -> None:
    db = store_target
    store = zincir.open_store(db)
    try:
        # a pid that surely does not exist here: it names a process on the other machine
        await held_by(store, "far", owner_id(pid=4_000_000_000, start=1, host="0123456789ab"))
        with pytest.raises(zincir.LeaseHeld, match="on another machine .*pid 4000000000"):
            await AgentContext.recover(store, "far")
        with pytest.raises(zincir.LeaseHeld):
            await WorkflowContext.open(store, "far")
        assert await ResumeWorker(store).claim(10) == []
        await held_by(store, "old", f"{_this_process().host}:4000000000:0123456789ab")
        with pytest.raises(zincir.LeaseHeld, match="wait for it to expire"):
            await AgentContext.recover(store, "old")  # an owner id of the old format
        assert await ResumeWorker(store).claim(10) == []
    finally:
        await store.close()


async def test_a_reused_pid_is_not_mistaken_for_the_owner(
    store_target: str, sleeper: Sleeper
) -> None:
    """The pid is alive but belongs to a process started at another time: the owner died
    and its pid was reused; with the pid's true start time the owner is alive."""
    db = store_target
    store = zincir.open_store(db)
    try:
        await held_by(store, "reused", owner_id(pid=sleeper.pid, start=sleeper.start + 1))
        await held_by(store, "same", owner_id(pid=sleeper.pid, start=sleeper.start))
        with pytest.raises(zincir.LeaseHeld, match=f"pid {sleeper.pid}"):
            await AgentContext.recover(store, "same")
        ctx = await AgentContext.recover(store, "reused")
        assert ctx.lease_token == 2
        await ctx.close()
    finally:
        await store.close()


async def test_an_owner_from_an_earlier_boot_is_gone(store_target: str) -> None:
    db = store_target
    store = zincir.open_store(db)
    here = _this_process()
    try:
        # this very process, as far as pid and start go: only the boot differs
        assert here.start is not None
        await held_by(store, "booted", owner_id(pid=os.getpid(), start=here.start, boot="0" * 16))
        ctx = await AgentContext.recover(store, "booted")
        assert ctx.lease_token == 2
        await ctx.close()
    finally:
        await store.close()


# -- WorkflowContext.open ------------------------------------------------------------------


async def test_workflow_open_right_after_sigkill_takes_the_run_over(store_target: str) -> None:
    db = store_target
    _, token = killed_owner(db, "workflow", "wf")
    store = zincir.open_store(db)
    calls: list[str] = []

    async def body() -> str:
        calls.append("s1")
        return "again"

    try:
        wf = await WorkflowContext.open(store, "wf", lease_ttl=60)
        assert wf.lease_token == token + 1
        assert await wf.step("s1", body) == "one" and calls == []  # replayed, not rerun
        await wf.complete("done")
    finally:
        await store.close()


# -- ResumeWorker ----------------------------------------------------------------------------


async def test_a_worker_claims_a_killed_owners_run_at_once(
    store_target: str, sleeper: Sleeper
) -> None:
    db = store_target
    _, token = killed_owner(db, "agent", "lost")
    store = zincir.open_store(db)
    try:
        await held_by(store, "alive", owner_id(pid=sleeper.pid, start=sleeper.start))
        await held_by(store, "reused", owner_id(pid=sleeper.pid, start=sleeper.start + 1))
        done: list[tuple[str, int]] = []

        async def handler(ctx: AgentContext) -> None:
            done.append((ctx.run_id, ctx.lease_token))
            await ctx.complete()

        worker = ResumeWorker(store, lease_ttl=60)
        assert await asyncio.wait_for(worker.run_once(handler), 10) == 2
        assert sorted(done) == [("lost", token + 1), ("reused", 2)]
        assert await worker.run_once(handler) == 0  # the live process keeps its run
    finally:
        await store.close()
    statuses = dict(select(db, "SELECT id, status FROM agent_runs"))
    assert statuses == {"lost": "completed", "reused": "completed", "alive": "running"}


# -- an operation claimed under the dead owner's lease --------------------------------------


async def test_an_operation_claimed_by_the_killed_owner_passes_to_the_new_owner_at_once(
    store_target: str, tmp_path: Path
) -> None:
    from tests.crash.leased_runtime_worker import invocation
    from zincir.contract import OperationKind, Success
    from zincir.durable import HandlerRegistry, LocalRuntime

    db = store_target
    side = str(tmp_path / "side.jsonl")
    argv = [str(LEASED_WORKER), db, side, "op-run", "--lease-ttl", "60", "--claim-ttl", "60"]
    child = subprocess.Popen(
        [sys.executable, *argv], env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        assert child.stdout.readline().strip() == "inside", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    store = zincir.open_store(db)
    calls: list[object] = []

    def handler(invocation: object, request: object) -> object:
        calls.append(invocation)
        return {"by": "heir"}

    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, "leased-tools", handler)
    try:
        started = time.monotonic()
        ctx = await AgentContext.recover(store, "op-run")
        runtime = LocalRuntime(store, registry, claim_ttl=60, poll_interval=0.02)
        record = await asyncio.wait_for(runtime.execute(invocation("op-run")), 10)
        assert time.monotonic() - started < 5  # neither the lease nor the claim waited out
        await ctx.complete()
    finally:
        await store.close()
    assert record.outcome == Success('{"by":"heir"}') and len(calls) == 1
    assert select(db, "SELECT status, attempts, claim_lease_token FROM operations") == [
        ("completed", 2, 2)
    ]


# -- racing takeovers of one dead owner's run --------------------------------------------------


async def test_racing_takeovers_of_a_dead_owners_run_let_exactly_one_win(
    store_target: str,
) -> None:
    """Four recovers and four worker claims, each on its own store (connection), race for
    one killed owner's run: one takes it, the others see the winner's live lease."""
    db = store_target
    _, token = killed_owner(db, "agent", "raced")
    stores = [zincir.open_store(db) for _ in range(8)]
    won: list[int] = []
    held: list[AgentContext] = []

    async def recover(store: Store) -> str:
        try:
            ctx = await AgentContext.recover(store, "raced", lease_ttl=60)
        except zincir.LeaseHeld as error:
            assert "live process on this machine" in str(error)
            return "held"
        won.append(ctx.lease_token)
        held.append(ctx)
        return "recovered"

    async def claim(store: Store) -> str:
        leases = await ResumeWorker(store, lease_ttl=60).claim(10)
        won.extend(lease.token for lease in leases)
        return "claimed" if leases else "none"

    try:
        outcomes = await asyncio.gather(
            *(recover(store) for store in stores[:4]), *(claim(store) for store in stores[4:])
        )
    finally:
        for ctx in held:
            await ctx.close()
        for store in stores:
            await store.close()
    assert won == [token + 1], outcomes
    assert sorted(outcomes).count("held") + sorted(outcomes).count("none") == 7
    [(current,)] = select(db, "SELECT lease_token FROM agent_runs WHERE id = 'raced'")
    assert current == token + 1
