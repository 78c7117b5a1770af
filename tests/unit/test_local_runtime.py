"""LocalRuntime: the conformance suite plus what the embedded store adds (SPEC §2)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import zincir
from tests.helpers import count, select, seqs, whole_record
from tests.runtime_conformance import (
    Calls,
    MakeRuntime,
    RuntimeConformance,
    make_invocation,
    never_called,
    new_run_id,
    registry_with,
)
from zincir import (
    AgentContext,
    DigestMismatch,
    FencedOut,
    InputDrift,
    InvalidInput,
    InvalidInvocation,
    OperationFailed,
    RunTerminal,
    SQLiteStore,
    StoreError,
    Suspend,
    ToolCall,
)
from zincir.contract import (
    Failure,
    Invocation,
    OperationKind,
    Record,
    Success,
    encode_record,
)
from zincir.durable import DurableRuntime, HandlerRegistry, LocalRuntime, RetryPolicy

FAST = RetryPolicy(max_attempts=3, initial_interval=timedelta(milliseconds=20), backoff=2.0)


class TestLocalRuntime(RuntimeConformance):
    @pytest.fixture
    def make_runtime(self, store: SQLiteStore) -> MakeRuntime:
        async def make(registry: HandlerRegistry) -> DurableRuntime:
            return LocalRuntime(store, registry, poll_interval=0.01)

        return make


def runtime_for(store: SQLiteStore, handler: Any, **options: Any) -> LocalRuntime:
    options.setdefault("poll_interval", 0.01)
    return LocalRuntime(store, registry_with(handler), **options)


def operation_rows(target: str) -> list[tuple[Any, ...]]:
    """The operations rows, each record made whole (a stored record holds neither the
    identity, digest nor input its row's columns keep)."""
    found = select(
        target,
        "SELECT run_id, step_id, sequence, kind, handler_id, input_digest, "
        "input_json, status, outcome, record, claim_expires_at, attempts "
        "FROM operations ORDER BY run_id, step_id, sequence",
    )
    return [(*row[:9], whole_record(row[9], row[6], *row[:6]), *row[10:]) for row in found]


# -- records, replay and the store -----------------------------------------------------


async def test_the_record_is_stored_before_execute_returns(
    store: SQLiteStore, store_url: str
) -> None:
    invocation = make_invocation("run-1", request={"order": "A1"})
    record = await runtime_for(store, Calls()).execute(invocation)
    [row] = operation_rows(store_url)
    assert row == (
        "run-1",
        "tool.call",
        0,
        "tool_call",
        "conformance-tools",
        invocation.input_digest(),
        invocation.input_json,
        "completed",
        "success",
        encode_record(record),
        None,
        1,
    )


async def test_replay_after_reopening_the_store(store_target: str) -> None:
    handler = Calls()
    invocation = make_invocation("run-reopen")
    first_store = zincir.open_store(store_target)
    try:
        record = await runtime_for(first_store, handler).execute(invocation)
    finally:
        await first_store.close()
    reopened = zincir.open_store(store_target)
    try:
        replay = await LocalRuntime(reopened, HandlerRegistry()).execute(invocation)
        assert replay == record
        assert await runtime_for(reopened, never_called).execute(invocation) == record
    finally:
        await reopened.close()
    assert handler.count == 1


async def test_fifty_gathered_calls_share_one_execution(store: SQLiteStore) -> None:
    handler = Calls()
    runtime = runtime_for(store, handler)
    invocation = make_invocation(new_run_id())
    records = await asyncio.gather(*(runtime.execute(invocation) for _ in range(50)))
    assert handler.count == 1
    assert len({encode_record(record) for record in records}) == 1


async def test_a_waiting_caller_with_other_input_gets_input_drift(store: SQLiteStore) -> None:
    handler = Calls()
    runtime = runtime_for(store, handler)
    run_id = new_run_id()
    first = asyncio.ensure_future(runtime.execute(make_invocation(run_id, request={"n": 1})))
    await asyncio.sleep(0)
    with pytest.raises(InputDrift):
        await runtime.execute(make_invocation(run_id, request={"n": 2}))
    assert isinstance((await first).outcome, Success)
    assert handler.count == 1


async def test_kind_or_handler_change_is_input_drift(store: SQLiteStore, store_url: str) -> None:
    registry = registry_with(Calls())
    registry.register(OperationKind.TOOL_CALL, "other-tools", Calls())
    registry.register(OperationKind.MCP_REQUEST, "conformance-tools", Calls())
    runtime = LocalRuntime(store, registry)
    await runtime.execute(make_invocation("run-kind"))
    before = operation_rows(store_url)
    with pytest.raises(InputDrift, match="other-tools"):
        await runtime.execute(make_invocation("run-kind", handler_id="other-tools"))
    with pytest.raises(InputDrift, match="mcp_request"):
        await runtime.execute(make_invocation("run-kind", kind=OperationKind.MCP_REQUEST))
    assert operation_rows(store_url) == before


@pytest.mark.parametrize(
    ("broken", "limit"),
    [
        ({"run_id": "r" * 257}, None),
        ({"handler_id": ""}, None),
        ({"sequence": 2**63}, None),
        ({"sequence": True}, None),
        ({"input_json": "Infinity"}, None),
        ({"input_json": ""}, None),
        ({"input_json": '{"big": "' + "x" * 100 + '"}'}, 64),
    ],
)
async def test_invalid_invocations_store_nothing(
    store: SQLiteStore, store_url: str, broken: dict[str, Any], limit: int | None
) -> None:
    handler = Calls()
    options: dict[str, Any] = {} if limit is None else {"max_input_bytes": limit}
    runtime = runtime_for(store, handler, **options)
    fields = {**make_invocation("run-invalid").to_dict(), **broken}
    with pytest.raises(InvalidInvocation):
        await runtime.execute(Invocation(**fields))
    with pytest.raises(InvalidInvocation):
        await runtime.execute({"run_id": "run-invalid"})  # type: ignore[arg-type]
    assert handler.count == 0
    assert count(store_url, "operations") == 0


def test_constructor_rejects_bad_options(store: SQLiteStore) -> None:
    registry = HandlerRegistry()
    with pytest.raises(InvalidInput):
        LocalRuntime(store, {})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        LocalRuntime(store, registry, retry=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        LocalRuntime(store, registry, claim_ttl=0)
    with pytest.raises(InvalidInput):
        LocalRuntime(store, registry, poll_interval=timedelta(seconds=-1))
    with pytest.raises(InvalidInput):
        LocalRuntime(store, registry, max_input_bytes=0)
    assert isinstance(LocalRuntime(store, registry, claim_ttl=1.5), DurableRuntime)


async def test_a_closed_store_raises_store_error(store_target: str) -> None:
    opened = zincir.open_store(store_target)
    runtime = runtime_for(opened, Calls())
    await runtime.execute(make_invocation("run-closed", sequence=0))
    await opened.close()
    with pytest.raises(StoreError):
        await runtime.execute(make_invocation("run-closed", sequence=1))


# -- outcomes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda: Failure("", False), "InvalidOutcome"),
        (lambda: Failure("Bad", "yes"), "InvalidOutcome"),  # type: ignore[arg-type]
        (lambda: Success("NaN"), "InvalidOutcome"),
        (lambda: object(), "OutputNotJson"),
        (lambda: float("nan"), "OutputNotJson"),
    ],
)
async def test_outcomes_that_cannot_be_stored_become_failures(
    store: SQLiteStore, answer: Any, error: str
) -> None:
    handler = Calls(lambda invocation, request: answer())
    record = await runtime_for(store, handler).execute(make_invocation(new_run_id()))
    assert isinstance(record.outcome, Failure)
    assert (record.outcome.error, record.outcome.retryable) == (error, False)
    assert record.outcome.message


async def test_bad_suspensions_become_failures(store: SQLiteStore) -> None:
    def bad_reason(invocation: Invocation, request: Any) -> Any:
        raise Suspend("because")

    def bad_state(invocation: Invocation, request: Any) -> Any:
        raise Suspend("approval", {"when": datetime.now(UTC)})

    run_id = new_run_id()
    registry = registry_with(bad_reason)
    registry.register(OperationKind.TOOL_CALL, "bad-state", bad_state)
    runtime = LocalRuntime(store, registry)
    record = await runtime.execute(make_invocation(run_id, sequence=0))
    assert isinstance(record.outcome, Failure) and record.outcome.error == "InvalidOutcome"
    assert "because" in record.outcome.message
    record = await runtime.execute(make_invocation(run_id, sequence=1, handler_id="bad-state"))
    assert isinstance(record.outcome, Failure) and record.outcome.error == "SuspendStateNotJson"


async def test_a_message_with_lone_surrogates_is_escaped(store: SQLiteStore) -> None:
    def odd(invocation: Invocation, request: Any) -> Any:
        raise ValueError("bad \udcff byte")

    record = await runtime_for(store, odd).execute(make_invocation(new_run_id()))
    assert record.outcome == Failure("ValueError", False, "bad \\udcff byte")


async def test_a_record_for_another_invocation_is_refused_and_not_stored(
    store: SQLiteStore, store_url: str
) -> None:
    invocation = make_invocation("run-foreign", sequence=0)
    foreign = Record.for_invocation(make_invocation("run-foreign", sequence=9), Success("1"))
    handler = Calls(lambda i, r: foreign)
    runtime = runtime_for(store, handler)
    with pytest.raises(DigestMismatch):
        await runtime.execute(invocation)
    assert count(store_url, "operations") == 0
    # the refused identity is free: a correct answer is stored next time
    handler.answer = lambda i, r: Record.for_invocation(i, Success('"ok"'))
    assert (await runtime.execute(invocation)).outcome == Success('"ok"')
    assert handler.count == 2


# -- retries in place --------------------------------------------------------------------


async def test_retryable_failures_are_retried_then_success_is_stored(
    store: SQLiteStore, store_url: str
) -> None:
    def flaky(invocation: Invocation, request: Any) -> Any:
        if handler.count < 3:
            raise OperationFailed("RateLimited", retryable=True)
        return {"ok": True}

    handler = Calls(flaky)
    started = time.monotonic()
    record = await runtime_for(store, handler, retry=FAST).execute(make_invocation("run-flaky"))
    assert time.monotonic() - started >= 0.02 + 0.04  # the policy's delays were slept
    assert record.outcome == Success('{"ok":true}')
    assert handler.count == 3
    assert [row[-1] for row in operation_rows(store_url)] == [3]


async def test_exhausted_retries_store_the_last_failure(store: SQLiteStore, store_url: str) -> None:
    def always(invocation: Invocation, request: Any) -> Any:
        raise OperationFailed("Unavailable", retryable=True, message=f"try {handler.count}")

    handler = Calls(always)
    runtime = runtime_for(store, handler, retry=FAST)
    invocation = make_invocation("run-exhausted")
    record = await runtime.execute(invocation)
    assert record.outcome == Failure("Unavailable", True, "try 3")
    assert handler.count == 3
    assert [(row[8], row[-1]) for row in operation_rows(store_url)] == [("failure", 3)]
    assert await runtime.execute(invocation) == record  # a persisted failure replays
    assert handler.count == 3


@pytest.mark.parametrize("exception", [OperationFailed("Denied"), KeyError("sku")])
async def test_non_retryable_failures_are_stored_at_once(
    store: SQLiteStore, store_url: str, exception: Exception
) -> None:
    def fail(invocation: Invocation, request: Any) -> Any:
        raise exception

    handler = Calls(fail)
    record = await runtime_for(store, handler, retry=FAST).execute(make_invocation("run-deny"))
    assert isinstance(record.outcome, Failure) and not record.outcome.retryable
    assert handler.count == 1
    assert [row[-1] for row in operation_rows(store_url)] == [1]


# -- inline callables --------------------------------------------------------------------


async def test_inline_callables_run_instead_of_a_registered_handler(
    store: SQLiteStore, store_url: str
) -> None:
    runtime = LocalRuntime(store, HandlerRegistry())
    calls: list[Any] = []

    async def body(invocation: Invocation, request: Any) -> Any:
        calls.append(request)
        return {"value": request["order"]}

    invocation = make_invocation("run-inline", request={"order": "A1"})
    record = await runtime.execute(invocation, inline=body)
    assert record.outcome == Success('{"value":"A1"}')
    # the stored row is data only; a replay ignores whatever callable is passed
    [row] = operation_rows(store_url)
    assert row[9] == encode_record(record)
    assert await runtime.execute(invocation, inline=never_called) == record
    assert await runtime.execute(invocation) == record
    assert calls == [{"order": "A1"}]


async def test_sync_inline_callables_and_their_failures(store: SQLiteStore) -> None:
    registered = Calls()
    runtime = runtime_for(store, registered)
    run_id = new_run_id()

    def double(invocation: Invocation, request: Any) -> Any:
        return request["n"] * 2

    def refuse(invocation: Invocation, request: Any) -> Any:
        raise OperationFailed("NotAllowed", message="closure said no")

    ok = await runtime.execute(
        make_invocation(run_id, sequence=0, request={"n": 21}), inline=double
    )
    failed = await runtime.execute(make_invocation(run_id, sequence=1), inline=refuse)
    assert ok.outcome == Success("42")
    assert failed.outcome == Failure("NotAllowed", False, "closure said no")
    assert registered.count == 0
    gathered = await asyncio.gather(
        *(runtime.execute(make_invocation(run_id, sequence=2), inline=Calls()) for _ in range(5))
    )
    assert len(set(gathered)) == 1


async def test_inline_must_be_callable(store: SQLiteStore, store_url: str) -> None:
    runtime = runtime_for(store, Calls())
    with pytest.raises(InvalidInput):
        await runtime.execute(make_invocation("run-x"), inline="not callable")  # type: ignore[arg-type]
    assert count(store_url, "operations") == 0


# -- the run's event log -----------------------------------------------------------------


async def test_operations_append_events_to_an_existing_run(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="ops", run_id="run-events")

    def answer(invocation: Invocation, request: Any) -> Any:
        if invocation.sequence == 1:
            raise OperationFailed("Quota", retryable=False)
        return "ok"

    runtime = runtime_for(store, Calls(answer))
    try:
        await ctx.record_response("thinking", [ToolCall("call-1", "lookup", {})])
        ok = make_invocation("run-events", sequence=0)
        await runtime.execute(ok)
        await ctx.record_tool_result("call-1", {"found": True})
        await runtime.execute(make_invocation("run-events", sequence=1))
        await runtime.execute(ok)  # a replay appends nothing
        await ctx.record_response("done", [])
    finally:
        await ctx.close()
    events = await store.list_events("run-events")
    assert [event.type for event in events] == [
        "state_transition",
        "llm_call",
        "tool_call",
        "operation_completed",
        "tool_result",
        "operation_completed",
        "llm_call",
    ]
    assert seqs(store_url, "run-events") == list(range(1, 8))
    assert events[3].payload == {
        "step_id": "tool.call",
        "sequence": 0,
        "kind": "tool_call",
        "handler_id": "conformance-tools",
        "outcome": "success",
        "input_digest": ok.input_digest(),
        "attempts": 1,
    }
    assert events[5].payload["outcome"] == "failure"
    assert events[5].payload["error"] == "Quota"


async def test_operations_of_unknown_runs_write_no_events(
    store: SQLiteStore, store_url: str
) -> None:
    await runtime_for(store, Calls()).execute(make_invocation("no-such-run"))
    assert count(store_url, "events") == 0
    assert count(store_url, "agent_runs") == 0
    assert count(store_url, "operations") == 1


# -- claims: renewal, takeover, fencing ----------------------------------------------------


class Gated:
    """A handler that signals when it is entered and returns ``answer`` once released."""

    def __init__(self, answer: Any = "done") -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.answer = answer
        self.count = 0

    async def __call__(self, invocation: Invocation, request: Any) -> Any:
        self.count += 1
        self.entered.set()
        await self.release.wait()
        return self.answer


async def test_the_claim_is_renewed_while_a_long_handler_runs(store_target: str) -> None:
    """A second runtime (its own store, as another process would be) waits past claim_ttl."""
    first_store, second_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        slow, other = Gated({"slow": True}), Calls()
        first = runtime_for(first_store, slow, claim_ttl=0.4)
        second = runtime_for(second_store, other, claim_ttl=0.4)
        invocation = make_invocation("run-renew")
        running = asyncio.ensure_future(first.execute(invocation))
        await slow.entered.wait()
        waiting = asyncio.ensure_future(second.execute(invocation))
        await asyncio.sleep(1.0)  # 2.5 claim_ttls
        slow.release.set()
        assert await waiting == await running
        assert (slow.count, other.count) == (1, 0)
    finally:
        await first_store.close()
        await second_store.close()


async def test_a_cancelled_execution_is_taken_over_at_once_in_its_runtime(
    store: SQLiteStore, store_url: str
) -> None:
    blocked, handler = Gated(), Calls()
    runtime = runtime_for(store, blocked, claim_ttl=30)
    invocation = make_invocation("run-cancel")
    task = asyncio.ensure_future(runtime.execute(invocation))
    await blocked.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [row[7] for row in operation_rows(store_url)] == ["claimed"]
    started = time.monotonic()
    record = await runtime.execute(invocation, inline=handler)
    assert time.monotonic() - started < 5  # not the 30 s claim_ttl
    assert isinstance(record.outcome, Success) and handler.count == 1
    assert [row[-1] for row in operation_rows(store_url)] == [2]


async def test_another_runtime_takes_over_an_expired_claim(store_target: str) -> None:
    first_store, second_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        blocked = Gated()
        invocation = make_invocation("run-expire")
        task = asyncio.ensure_future(
            runtime_for(first_store, blocked, claim_ttl=0.2).execute(invocation)
        )
        await blocked.entered.wait()
        task.cancel()  # stands in for a dead owner: the claim is no longer renewed
        with pytest.raises(asyncio.CancelledError):
            await task
        handler = Calls()
        started = time.monotonic()
        record = await runtime_for(second_store, handler, claim_ttl=0.2).execute(invocation)
        assert time.monotonic() - started >= 0.05  # it waited for the expiry
        assert isinstance(record.outcome, Success) and handler.count == 1
    finally:
        await first_store.close()
        await second_store.close()


def later_clock(offset: timedelta) -> Any:
    return lambda: datetime.now(UTC) + offset


@pytest.mark.parametrize("first_to_finish", ["taker", "original"])
async def test_the_final_write_is_fenced_on_the_stored_record(
    store_target: str, first_to_finish: str
) -> None:
    """An owner whose claim was taken over returns the record stored first, never its own."""
    original_store = zincir.open_store(store_target)
    # the taker's clock runs an hour ahead, so it finds the original's claim expired
    taker_store = zincir.open_store(store_target, clock=later_clock(timedelta(hours=1)))
    try:
        invocation = make_invocation("run-fence")
        handlers = {"original": Gated("original"), "taker": Gated("taker")}
        tasks = {}
        for name, store in (("original", original_store), ("taker", taker_store)):
            runtime = runtime_for(store, handlers[name])
            tasks[name] = asyncio.ensure_future(runtime.execute(invocation))
            await handlers[name].entered.wait()
        second_to_finish = "original" if first_to_finish == "taker" else "taker"
        handlers[first_to_finish].release.set()
        first = await tasks[first_to_finish]
        handlers[second_to_finish].release.set()
        assert await tasks[second_to_finish] == first
        assert first.outcome == Success(json.dumps(first_to_finish))
        [row] = operation_rows(store_target)
        assert row[9] == encode_record(first) and row[-1] == 2
    finally:
        await original_store.close()
        await taker_store.close()


# -- only a lease holder writes a run's log ---------------------------------------------


async def operation_events(store: SQLiteStore, run_id: str) -> list[Any]:
    return [e for e in await store.list_events(run_id) if e.type == "operation_completed"]


@pytest.mark.parametrize("new_owner", ["holds", "finishes"])
async def test_a_taken_over_owner_stores_no_record_and_no_event(
    store_target: str, new_owner: str
) -> None:
    """The old owner's late finish is refused whole; the new owner runs the handler again."""
    old_store, new_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        old_ctx = await AgentContext.create(old_store, "fenced", run_id="run-fenced")
        slow = Gated({"by": "old"})
        invocation = make_invocation("run-fenced")
        running = asyncio.ensure_future(
            runtime_for(old_store, slow, claim_ttl=0.3).execute(invocation)
        )
        await slow.entered.wait()
        new_ctx = await AgentContext.force_recover(new_store, "run-fenced")
        fresh = Calls(lambda i, r: {"by": "new"})
        if new_owner == "finishes":
            # the old claim was made under the superseded lease: it is taken over at once
            record = await asyncio.wait_for(
                runtime_for(new_store, fresh, claim_ttl=0.3).execute(invocation), 10
            )
            await new_ctx.complete()
        before = await new_store.list_events("run-fenced")
        slow.release.set()
        with pytest.raises(FencedOut if new_owner == "holds" else RunTerminal):
            await running
        assert await new_store.list_events("run-fenced") == before
        if new_owner == "holds":
            [row] = operation_rows(store_target)
            assert (row[7], row[9]) == ("claimed", None)  # left for the new owner
            assert await operation_events(new_store, "run-fenced") == []
            record = await runtime_for(new_store, fresh, claim_ttl=0.3).execute(invocation)
            await new_ctx.complete()
        assert record.outcome == Success('{"by":"new"}') and fresh.count == 1
        [row] = operation_rows(store_target)
        assert (row[7], row[9], row[-1]) == ("completed", encode_record(record), 2)
        [event] = await operation_events(new_store, "run-fenced")
        assert event.payload["attempts"] == 2
        types = [e.type for e in await new_store.list_events("run-fenced")]
        assert types[-2:] == ["operation_completed", "state_transition"]
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


async def test_a_claim_under_a_lost_lease_is_refused_before_any_write(store_target: str) -> None:
    old_store, new_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        old_ctx = await AgentContext.create(old_store, "fenced", run_id="run-late")
        new_ctx = await AgentContext.force_recover(new_store, "run-late")
        handler = Calls()
        with pytest.raises(FencedOut):
            await runtime_for(old_store, handler).execute(make_invocation("run-late"))
        assert handler.count == 0
        assert count(store_target, "operations") == 0
        assert await operation_events(new_store, "run-late") == []
        await new_ctx.complete()
        with pytest.raises(RunTerminal):
            await runtime_for(old_store, handler).execute(make_invocation("run-late"))
        assert count(store_target, "operations") == 0
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


async def test_without_a_lease_the_record_is_stored_and_no_log_is_written(
    store_target: str,
) -> None:
    """A run owned by another process (or by nobody) gets no event from a leaseless runtime."""
    owner_store, other_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        ctx = await AgentContext.create(owner_store, "owned", run_id="run-owned")
        before = await owner_store.list_events("run-owned")
        record = await runtime_for(other_store, Calls()).execute(make_invocation("run-owned"))
        await ctx.close()
        record_2 = await runtime_for(owner_store, Calls()).execute(
            make_invocation("run-owned", sequence=1)
        )  # the lease is released: none held
        assert await owner_store.list_events("run-owned") == before
        assert [row[9] for row in operation_rows(store_target)] == [
            encode_record(record),
            encode_record(record_2),
        ]
    finally:
        await owner_store.close()
        await other_store.close()


async def test_a_replay_under_a_fenced_lease_returns_the_stored_record(store_target: str) -> None:
    """Reading a completed record writes nothing, so it needs no fence."""
    old_store, new_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        old_ctx = await AgentContext.create(old_store, "replay", run_id="run-replay")
        invocation = make_invocation("run-replay")
        record = await runtime_for(old_store, Calls()).execute(invocation)
        new_ctx = await AgentContext.force_recover(new_store, "run-replay")
        assert await runtime_for(old_store, never_called).execute(invocation) == record
        assert len(await operation_events(new_store, "run-replay")) == 1
        await new_ctx.close()
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


# -- a claim made under a run's lease passes to the run's next owner at once ----------------


async def abandoned_leased_claim(
    old_store: SQLiteStore, run_id: str, claim_ttl: timedelta | float = 30
) -> AgentContext:
    """A context of ``old_store`` holds ``run_id``; its runtime's claim (claim_ttl 30 s) is
    left behind by a cancelled execution, as a killed process leaves it."""
    ctx = await AgentContext.create(old_store, "leased", run_id=run_id)
    blocked = Gated()
    task = asyncio.ensure_future(
        runtime_for(old_store, blocked, claim_ttl=claim_ttl).execute(make_invocation(run_id))
    )
    await blocked.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return ctx


def claim_columns(target: str) -> list[tuple[Any, ...]]:
    return select(
        target, "SELECT status, claim_lease_owner, claim_lease_token, attempts FROM operations"
    )


@pytest.mark.parametrize("lost", ["force_recover", "released", "finished", "expired"])
async def test_a_claim_under_a_lost_lease_is_taken_over_at_once(
    store_target: str, lost: str
) -> None:
    """The dead owner's claim (30 s claim_ttl) passes to the run's next owner, or to anyone
    once nobody holds the run, without waiting for its expiry: it runs the handler again."""
    old_store = zincir.open_store(store_target)
    # "expired": the taker's clock is ten minutes ahead, past the lease (30 s) but not the
    # claim (an hour), so only the lease's expiry frees it
    offset = timedelta(minutes=10) if lost == "expired" else timedelta(0)
    new_store = zincir.open_store(store_target, clock=later_clock(offset))
    try:
        claim_ttl = timedelta(hours=1) if lost == "expired" else 30
        old_ctx = await abandoned_leased_claim(old_store, "run-lost", claim_ttl)
        assert claim_columns(store_target) == [("claimed", old_ctx.lease_owner, 1, 1)]
        new_ctx = None
        if lost == "released":
            await old_ctx.close()
        elif lost == "expired":
            await old_ctx._heartbeat.stop()  # the owner stopped renewing: as if killed
        else:
            new_ctx = await AgentContext.force_recover(new_store, "run-lost")
            if lost == "finished":
                await new_ctx.complete()
                new_ctx = None
        handler = Calls()
        started = time.monotonic()
        record = await asyncio.wait_for(
            runtime_for(new_store, handler, claim_ttl=30).execute(make_invocation("run-lost")), 5
        )
        assert time.monotonic() - started < 5  # not the 30 s claim_ttl
        assert isinstance(record.outcome, Success) and handler.count == 1
        lease = (None, None) if new_ctx is None else (new_ctx.lease_owner, 2)
        assert claim_columns(store_target) == [("completed", *lease, 2)]
        events = await operation_events(new_store, "run-lost")
        if new_ctx is not None:  # the new owner's record commits with its event
            assert [e.payload["attempts"] for e in events] == [2]
            await new_ctx.complete()
        else:
            assert events == []
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


async def test_a_waiter_takes_over_once_the_owner_is_fenced(store_target: str) -> None:
    """A leaseless runtime polling the owner's live claim takes it over as soon as another
    process recovers the run: its next poll finds the claim fenced."""
    old_store, new_store = zincir.open_store(store_target), zincir.open_store(store_target)
    waiter_store = zincir.open_store(store_target)
    try:
        old_ctx = await AgentContext.create(old_store, "leased", run_id="run-poll")
        slow = Gated({"by": "old"})
        invocation = make_invocation("run-poll")
        running = asyncio.ensure_future(
            runtime_for(old_store, slow, claim_ttl=30).execute(invocation)
        )
        await slow.entered.wait()
        fresh = Calls(lambda i, r: {"by": "waiter"})
        waiting = asyncio.ensure_future(
            runtime_for(waiter_store, fresh, claim_ttl=30).execute(invocation)
        )
        await asyncio.sleep(0.2)
        assert not waiting.done() and fresh.count == 0  # a live claim of the current token
        new_ctx = await AgentContext.force_recover(new_store, "run-poll")
        record = await asyncio.wait_for(waiting, 5)
        assert record.outcome == Success('{"by":"waiter"}') and fresh.count == 1
        slow.release.set()
        with pytest.raises(FencedOut):
            await running
        # the new owner and the old one replay the stored record
        assert await runtime_for(new_store, never_called).execute(invocation) == record
        assert await runtime_for(old_store, never_called).execute(invocation) == record
        assert claim_columns(store_target) == [("completed", None, None, 2)]
        await new_ctx.complete()
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()
        await waiter_store.close()


async def test_two_runtimes_of_one_live_lease_share_one_execution(
    store: SQLiteStore, store_url: str
) -> None:
    """Same process, same lease: the second runtime waits for the first one's record, past
    several claim_ttls (the claim is renewed and its token is current)."""
    ctx = await AgentContext.create(store, "shared", run_id="run-shared")
    try:
        slow, other = Gated({"slow": True}), Calls()
        invocation = make_invocation("run-shared")
        running = asyncio.ensure_future(runtime_for(store, slow, claim_ttl=0.3).execute(invocation))
        await slow.entered.wait()
        waiting = asyncio.ensure_future(
            runtime_for(store, other, claim_ttl=0.3).execute(invocation)
        )
        await asyncio.sleep(1.0)
        assert claim_columns(store_url) == [("claimed", ctx.lease_owner, 1, 1)]
        slow.release.set()
        assert await waiting == await running
        assert (slow.count, other.count) == (1, 0)
        assert [e.payload["attempts"] for e in await operation_events(store, "run-shared")] == [1]
    finally:
        await ctx.close()


async def test_a_claim_without_a_lease_waits_for_its_expiry_even_for_the_runs_owner(
    store_target: str,
) -> None:
    """A leaseless runtime's claim carries no token: a new owner of the run waits for it."""
    leaseless_store, owner_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        await (await AgentContext.create(owner_store, "leaseless", run_id="run-free")).close()
        blocked = Gated()
        task = asyncio.ensure_future(
            runtime_for(leaseless_store, blocked, claim_ttl=0.6).execute(
                make_invocation("run-free")
            )
        )
        await blocked.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        abandoned = time.monotonic()
        assert claim_columns(store_target) == [("claimed", None, None, 1)]
        ctx = await AgentContext.force_recover(owner_store, "run-free")
        handler = Calls()
        record = await runtime_for(owner_store, handler, claim_ttl=0.6).execute(
            make_invocation("run-free")
        )
        assert time.monotonic() - abandoned >= 0.5  # it waited for the claim's expiry
        assert isinstance(record.outcome, Success) and handler.count == 1
        assert claim_columns(store_target) == [("completed", ctx.lease_owner, 2, 2)]
        await ctx.complete()
    finally:
        await leaseless_store.close()
        await owner_store.close()
