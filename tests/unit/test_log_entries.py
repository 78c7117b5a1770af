"""Log entries stored with an operation record: ``finish_operation(log=...)``,
``LocalRuntime.execute_and_log`` and the non-durable ``record_*`` writes of a context."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.helpers import count, select, seqs
from tests.runtime_conformance import Calls, make_invocation, never_called, registry_with
from zincir import (
    AgentContext,
    DuplicateToolCall,
    FencedOut,
    InvalidInput,
    SQLiteStore,
    ToolCall,
    UnknownToolCall,
)
from zincir.contract import Record, Success, encode_record
from zincir.durable import LocalRuntime
from zincir.durable._operations import new_operation, stored_outcome
from zincir.runs import response_entry, tool_result_entry
from zincir.store import LogEntry, OperationOutcome, ResponseEntry, ToolResultEntry

TTL = timedelta(seconds=30)


def finished(run_id: str, sequence: int = 0, output: str = '"ok"') -> OperationOutcome:
    record = Record.for_invocation(make_invocation(run_id, sequence=sequence), Success(output))
    return stored_outcome(record, encode_record(record))


def asks_for(run_id: str, *call_ids: str, content: str = "thinking") -> ResponseEntry:
    return response_entry(run_id, content, [ToolCall(call_id, "lookup") for call_id in call_ids])


def events(target: str, run_id: str) -> list[tuple[int, str, str | None]]:
    return [
        (int(seq), str(kind), call_id)
        for seq, kind, call_id in select(
            target,
            "SELECT seq, type, tool_call_id FROM events WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
    ]


def open_intents(target: str, run_id: str) -> list[str]:
    return [
        str(call_id)
        for (call_id,) in select(
            target,
            "SELECT tool_call_id FROM open_intents WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
    ]


def last_seq(target: str, run_id: str) -> int:
    """The run's last seq as stored: its row's, or its newest event's (on SQLite the lease
    holder's appends leave the row unwritten)."""
    [(row, newest)] = select(
        target,
        "SELECT last_seq, (SELECT max(seq) FROM events WHERE run_id = ?) FROM agent_runs "
        "WHERE id = ?",
        (run_id, run_id),
    )
    return max(int(row), int(newest or 0))


# -- finish_operation(log=...) ---------------------------------------------------------------


async def test_the_entries_follow_operation_completed_in_one_write(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-log")
    try:
        model = new_operation(make_invocation("run-log", step_id="model.request"))
        stored = await store.finish_operation(
            model,
            finished("run-log"),
            owner="a/1",
            lease=ctx.lease,
            log=[asks_for("run-log", "call-1", "call-2")],
        )
        assert stored is None
        tool = new_operation(make_invocation("run-log", step_id="tool.call"))
        result = tool_result_entry("run-log", "call-1", {"found": True})
        assert (
            await store.finish_operation(
                tool, finished("run-log"), owner="a/2", lease=ctx.lease, log=[result]
            )
            is None
        )
    finally:
        await ctx.close()
    assert events(store_url, "run-log") == [
        (1, "state_transition", None),
        (2, "operation_completed", None),
        (3, "llm_call", None),
        (4, "tool_call", "call-1"),
        (5, "tool_call", "call-2"),
        (6, "operation_completed", None),
        (7, "tool_result", "call-1"),
    ]
    assert last_seq(store_url, "run-log") == 7
    assert open_intents(store_url, "run-log") == ["call-2"]
    listed = await store.list_events("run-log")
    assert listed[1].payload["step_id"] == "model.request"
    assert listed[2].payload["tool_calls"][0]["id"] == "call-1"
    assert listed[6].payload == {"id": "call-1", "result": {"found": True}, "is_error": False}
    for operation in (model, tool):
        row = await store.get_operation(operation.key)
        assert row is not None and row.status == "completed"


async def test_several_entries_are_written_in_their_order(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-order")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        operation = new_operation(make_invocation("run-order"))
        log: list[LogEntry] = [
            tool_result_entry("run-order", "call-1", 1),
            asks_for("run-order", "call-2", "call-3"),
        ]
        await store.finish_operation(
            operation, finished("run-order"), owner="a/1", lease=ctx.lease, log=log
        )
    finally:
        await ctx.close()
    assert events(store_url, "run-order")[3:] == [
        (4, "operation_completed", None),
        (5, "tool_result", "call-1"),
        (6, "llm_call", None),
        (7, "tool_call", "call-2"),
        (8, "tool_call", "call-3"),
    ]
    assert last_seq(store_url, "run-order") == 8
    assert open_intents(store_url, "run-order") == ["call-2", "call-3"]
    # the open intents point at their own events
    assert select(
        store_url, "SELECT tool_call_id, seq FROM open_intents WHERE run_id = 'run-order'"
    ) == [("call-2", 7), ("call-3", 8)]


async def test_a_result_may_follow_its_intent_in_one_log(
    store: SQLiteStore, store_url: str
) -> None:
    """The entries are appended in order: a result after the response asking for it fits."""
    ctx = await AgentContext.create(store, name="log", run_id="run-same-log")
    try:
        operation = new_operation(make_invocation("run-same-log"))
        log: list[LogEntry] = [
            asks_for("run-same-log", "call-1"),
            tool_result_entry("run-same-log", "call-1", 1),
        ]
        await store.finish_operation(
            operation, finished("run-same-log"), owner="a/1", lease=ctx.lease, log=log
        )
    finally:
        await ctx.close()
    assert [kind for _, kind, _ in events(store_url, "run-same-log")] == [
        "state_transition",
        "operation_completed",
        "llm_call",
        "tool_call",
        "tool_result",
    ]
    assert open_intents(store_url, "run-same-log") == []


async def refused(
    store: SQLiteStore,
    store_url: str,
    ctx: AgentContext,
    log: Sequence[LogEntry],
    error: type[Exception],
    match: str | None = None,
) -> tuple[Any, list[tuple[int, str, str | None]]]:
    """``finish_operation`` with ``log`` raises ``error`` and leaves the run's log as it was;
    returns the operation and that log."""
    run_id = ctx.run_id
    before = events(store_url, run_id)
    operation = new_operation(make_invocation(run_id))
    with pytest.raises(error, match=match):
        await store.finish_operation(
            operation, finished(run_id), owner="a/1", lease=ctx.lease, log=log
        )
    assert events(store_url, run_id) == before
    return operation, before


@pytest.mark.parametrize("opened", ["before", "in_the_log"])
async def test_two_results_for_one_call_in_one_log_store_nothing(
    store: SQLiteStore, store_url: str, opened: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-two")
    try:
        log: list[LogEntry] = [
            tool_result_entry("run-two", "call-1", 1),
            tool_result_entry("run-two", "call-1", 2),
        ]
        if opened == "before":
            await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        else:
            log.insert(0, asks_for("run-two", "call-1"))
        intents = open_intents(store_url, "run-two")
        operation, _ = await refused(
            store, store_url, ctx, log, DuplicateToolCall, "already has a result"
        )
        assert open_intents(store_url, "run-two") == intents
        assert await store.get_operation(operation.key) is None
    finally:
        await ctx.close()


async def test_a_result_for_an_unknown_call_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-unknown")
    try:
        unknown = ToolResultEntry("call-x", '{"id":"call-x","result":1,"is_error":false}')
        operation, before = await refused(
            store, store_url, ctx, [unknown], UnknownToolCall, "call-x"
        )
        assert last_seq(store_url, "run-unknown") == len(before)
        assert await store.get_operation(operation.key) is None
        assert count(store_url, "operations") == 0
        # the run's log goes on as if the refused finish had never been tried
        await ctx.record_response("next", [])
    finally:
        await ctx.close()
    assert seqs(store_url, "run-unknown") == list(range(1, len(before) + 2))


async def test_a_response_reusing_a_call_id_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-dup")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        log = [asks_for("run-dup", "call-2", "call-1")]
        operation, _ = await refused(store, store_url, ctx, log, DuplicateToolCall)
        assert open_intents(store_url, "run-dup") == ["call-1"]
        assert await store.get_operation(operation.key) is None
        # the same holds once the reused call has its result: its intent is in the log
        await ctx.record_tool_result("call-1", "done")
        operation, _ = await refused(
            store, store_url, ctx, [asks_for("run-dup", "call-1")], DuplicateToolCall
        )
        assert await store.get_operation(operation.key) is None
    finally:
        await ctx.close()


async def test_a_second_result_for_a_call_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-twice")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        await ctx.record_tool_result("call-1", "done")
        log = [tool_result_entry("run-twice", "call-1", "again")]
        operation, _ = await refused(
            store, store_url, ctx, log, DuplicateToolCall, "already has a result"
        )
        assert await store.get_operation(operation.key) is None
    finally:
        await ctx.close()


async def test_one_bad_entry_undoes_the_good_ones_before_it(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-partial")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        before = events(store_url, "run-partial")
        operation = new_operation(make_invocation("run-partial"))
        claim = await store.claim_operation(operation, owner="a/1", ttl=TTL, lease=ctx.lease)
        assert claim.claimed
        with pytest.raises(UnknownToolCall):
            await store.finish_operation(
                operation,
                finished("run-partial"),
                owner="a/1",
                lease=ctx.lease,
                log=[
                    tool_result_entry("run-partial", "call-1", 1),
                    asks_for("run-partial", "call-2"),
                    tool_result_entry("run-partial", "call-3", 3),
                ],
            )
        assert events(store_url, "run-partial") == before
        assert open_intents(store_url, "run-partial") == ["call-1"]
        row = await store.get_operation(operation.key)
        assert row is not None and (row.status, row.record, row.attempts) == ("claimed", None, 1)
        # the claim is still its owner's: the record can be stored without the entries
        assert (
            await store.finish_operation(
                operation, finished("run-partial"), owner="a/1", lease=ctx.lease
            )
            is None
        )
    finally:
        await ctx.close()
    row = await store.get_operation(operation.key)
    assert row is not None and row.status == "completed"
    assert [kind for _, kind, _ in events(store_url, "run-partial")][len(before) :] == [
        "operation_completed"
    ]


async def test_entries_without_a_lease_are_refused_before_any_write(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-nolease")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        before = events(store_url, "run-nolease")
        operation = new_operation(make_invocation("run-nolease"))
        with pytest.raises(InvalidInput, match="lease"):
            await store.finish_operation(
                operation,
                finished("run-nolease"),
                owner="a/1",
                log=[tool_result_entry("run-nolease", "call-1", 1)],
            )
        assert events(store_url, "run-nolease") == before
        assert await store.get_operation(operation.key) is None
        assert count(store_url, "operations") == 0
    finally:
        await ctx.close()


async def test_entries_under_a_lost_lease_store_nothing(store_target: str) -> None:
    old_store, new_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        old_ctx = await AgentContext.create(old_store, "log", run_id="run-lost")
        await old_ctx.record_response("first", [ToolCall("call-1", "lookup")])
        new_ctx = await AgentContext.force_recover(new_store, "run-lost")
        before = events(store_target, "run-lost")
        operation = new_operation(make_invocation("run-lost"))
        with pytest.raises(FencedOut):
            await old_store.finish_operation(
                operation,
                finished("run-lost"),
                owner="a/1",
                lease=old_ctx.lease,
                log=[tool_result_entry("run-lost", "call-1", 1)],
            )
        assert events(store_target, "run-lost") == before
        assert count(store_target, "operations") == 0
        await new_ctx.close()
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


# -- LocalRuntime.execute_and_log ----------------------------------------------------------


class Logger:
    """A ``log`` callable that counts its calls and returns ``entries(record)``."""

    def __init__(self, entries: Any) -> None:
        self.records: list[Record] = []
        self.entries = entries

    def __call__(self, record: Record) -> Sequence[LogEntry]:
        self.records.append(record)
        made: Sequence[LogEntry] = self.entries(record)
        return made

    @property
    def count(self) -> int:
        return len(self.records)


def runtime(store: SQLiteStore, handler: Any) -> LocalRuntime:
    return LocalRuntime(store, registry_with(handler), poll_interval=0.01)


def response_of(run_id: str, *call_ids: str) -> Logger:
    """Log the record's output as a response asking for ``call_ids``."""
    return Logger(
        lambda record: [
            response_entry(
                run_id, record.outcome.output_json, [ToolCall(c, "lookup") for c in call_ids]
            )
        ]
    )


async def test_a_new_record_is_stored_with_its_entries(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-new")
    handler = Calls()
    log = response_of("run-new", "call-1")
    try:
        invocation = make_invocation("run-new")
        record, logged = await runtime(store, handler).execute_and_log(invocation, log)
    finally:
        await ctx.close()
    assert logged is True
    assert handler.count == 1 and log.records == [record]
    assert record.invocation == invocation and isinstance(record.outcome, Success)
    assert [kind for _, kind, _ in events(store_url, "run-new")] == [
        "state_transition",
        "operation_completed",
        "llm_call",
        "tool_call",
    ]
    listed = await store.list_events("run-new")
    assert listed[2].payload["content"] == record.outcome.output_json
    assert open_intents(store_url, "run-new") == ["call-1"]
    row = await store.get_operation(new_operation(invocation).key)
    assert row is not None and row.record == encode_record(record)


async def test_a_replay_writes_no_entries(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-replay")
    try:
        invocation = make_invocation("run-replay")
        first, logged = await runtime(store, Calls()).execute_and_log(
            invocation, response_of("run-replay", "call-1")
        )
        assert logged
        before = events(store_url, "run-replay")
        log = response_of("run-replay", "call-2")
        again, logged = await runtime(store, never_called).execute_and_log(invocation, log)
        assert (again, logged) == (first, False)
        assert log.count == 0
        assert events(store_url, "run-replay") == before
    finally:
        await ctx.close()


async def test_without_the_runs_lease_no_entries_are_written(store_target: str) -> None:
    owner_store, other_store = zincir.open_store(store_target), zincir.open_store(store_target)
    try:
        ctx = await AgentContext.create(owner_store, "log", run_id="run-elsewhere")
        before = events(store_target, "run-elsewhere")
        handler = Calls()
        log = response_of("run-elsewhere", "call-1")
        invocation = make_invocation("run-elsewhere")
        record, logged = await runtime(other_store, handler).execute_and_log(invocation, log)
        assert (logged, handler.count) == (False, 1)
        assert events(store_target, "run-elsewhere") == before
        row = await other_store.get_operation(new_operation(invocation).key)
        assert row is not None and row.record == encode_record(record)
        await ctx.close()
        # released: no context of this process holds the lease any more
        second = make_invocation("run-elsewhere", sequence=1)
        record, logged = await runtime(owner_store, handler).execute_and_log(second, log)
        assert (logged, handler.count) == (False, 2)
        assert events(store_target, "run-elsewhere") == before
        row = await owner_store.get_operation(new_operation(second).key)
        assert row is not None and row.record == encode_record(record)
    finally:
        await owner_store.close()
        await other_store.close()


async def test_a_failing_log_still_stores_the_record(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-raises")

    def broken(record: Record) -> Sequence[LogEntry]:
        raise ValueError("the log cannot be made")

    log = Logger(broken)
    handler = Calls()
    try:
        invocation = make_invocation("run-raises")
        record, logged = await runtime(store, handler).execute_and_log(invocation, log)
        assert (logged, handler.count, log.count) == (False, 1, 1)
        row = await store.get_operation(new_operation(invocation).key)
        assert row is not None and (row.status, row.record) == ("completed", encode_record(record))
        kinds = [kind for _, kind, _ in events(store_url, "run-raises")]
        assert kinds == ["state_transition", "operation_completed"]
        again, logged = await runtime(store, never_called).execute_and_log(invocation, log)
        assert (again, logged, log.count) == (record, False, 1)
    finally:
        await ctx.close()


@pytest.mark.parametrize("misfit", ["unknown_call", "reused_call"])
async def test_entries_that_do_not_fit_leave_the_record_stored_without_them(
    store: SQLiteStore, store_url: str, misfit: str
) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-misfit")
    handler = Calls()
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")])
        before = events(store_url, "run-misfit")
        if misfit == "unknown_call":
            log = Logger(lambda record: [tool_result_entry("run-misfit", "call-9", "x")])
        else:
            log = response_of("run-misfit", "call-1")
        invocation = make_invocation("run-misfit")
        record, logged = await runtime(store, handler).execute_and_log(invocation, log)
        assert (logged, handler.count, log.count) == (False, 1, 1)
        row = await store.get_operation(new_operation(invocation).key)
        assert row is not None and (row.status, row.record) == ("completed", encode_record(record))
        after = events(store_url, "run-misfit")
        assert after[: len(before)] == before
        assert [kind for _, kind, _ in after[len(before) :]] == ["operation_completed"]
        assert open_intents(store_url, "run-misfit") == ["call-1"]
        listed = await store.list_events("run-misfit")
        assert listed[-1].payload["outcome"] == "success"
        assert listed[-1].payload["input_digest"] == invocation.input_digest()
    finally:
        await ctx.close()


async def test_no_entries_mean_nothing_was_logged(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-empty")
    try:
        log = Logger(lambda record: [])
        record, logged = await runtime(store, Calls()).execute_and_log(
            make_invocation("run-empty"), log
        )
        assert (logged, log.count) == (False, 1)
        assert [kind for _, kind, _ in events(store_url, "run-empty")] == [
            "state_transition",
            "operation_completed",
        ]
    finally:
        await ctx.close()


async def test_concurrent_callers_log_once(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="log", run_id="run-shared")
    handler = Calls()
    shared = runtime(store, handler)
    logs = [response_of("run-shared", f"call-{n}") for n in range(5)]
    try:
        invocation = make_invocation("run-shared")
        results = await asyncio.gather(*(shared.execute_and_log(invocation, log) for log in logs))
    finally:
        await ctx.close()
    assert handler.count == 1
    assert len({record for record, _ in results}) == 1
    assert sorted(logged for _, logged in results) == [False] * 4 + [True]
    assert sum(log.count for log in logs) == 1
    kinds = [kind for _, kind, _ in events(store_url, "run-shared")]
    assert kinds.count("llm_call") == 1 and kinds.count("operation_completed") == 1


# -- record_response / record_tool_result with durable=False ---------------------------------


async def write_turn(ctx: AgentContext, *, durable: bool) -> None:
    await ctx.record_response(
        {"text": "two tools"},
        [ToolCall("call-a", "lookup", {"q": 1}), ToolCall("call-b", "fetch")],
        "tool_calls",
        usage={"input_tokens": 3},
        model="m-1",
        durable=durable,
    )
    await ctx.record_tool_result("call-b", {"n": 2}, durable=durable)
    await ctx.record_tool_result("call-a", "bad", is_error=True, durable=durable)
    await ctx.record_response("done", durable=durable)


def log_of(target: str, run_id: str) -> list[tuple[Any, ...]]:
    return select(
        target,
        "SELECT seq, type, payload, tool_call_id FROM events WHERE run_id = ? ORDER BY seq",
        (run_id,),
    )


async def test_non_durable_writes_store_the_same_events(store_target: str) -> None:
    store = zincir.open_store(store_target)
    try:
        for run_id, durable in (("run-durable", True), ("run-fast", False)):
            ctx = await AgentContext.create(store, name="turn", run_id=run_id)
            await write_turn(ctx, durable=durable)
            state = await ctx.state()
            assert [e.type for e in state.events] == [
                "state_transition",
                "llm_call",
                "tool_call",
                "tool_call",
                "tool_result",
                "tool_result",
                "llm_call",
            ]
            assert await ctx.pending_tools() == []
            await ctx.close()
    finally:
        await store.close()
    durable_log, fast_log = log_of(store_target, "run-durable"), log_of(store_target, "run-fast")
    assert len(fast_log) == 7
    assert [row[1:] for row in fast_log[1:]] == [row[1:] for row in durable_log[1:]]
    assert [row[0] for row in fast_log] == list(range(1, 8))
    reopened = zincir.open_store(store_target)
    try:
        fast = await reopened.list_events("run-fast")
        assert fast[1].payload == {
            "content": {"text": "two tools"},
            "tool_calls": [
                {"id": "call-a", "name": "lookup", "arguments": {"q": 1}},
                {"id": "call-b", "name": "fetch", "arguments": {}},
            ],
            "stop_reason": "tool_calls",
            "usage": {"input_tokens": 3},
            "model": "m-1",
        }
        assert fast[5].payload == {"id": "call-a", "result": "bad", "is_error": True}
    finally:
        await reopened.close()


async def test_non_durable_writes_refuse_what_durable_ones_refuse(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="turn", run_id="run-refused")
    try:
        await ctx.record_response("first", [ToolCall("call-1", "lookup")], durable=False)
        before = log_of(store_url, "run-refused")
        with pytest.raises(DuplicateToolCall):
            await ctx.record_response("again", [ToolCall("call-1", "lookup")], durable=False)
        with pytest.raises(UnknownToolCall):
            await ctx.record_tool_result("call-2", 1, durable=False)
        await ctx.record_tool_result("call-1", 1, durable=False)
        with pytest.raises(DuplicateToolCall):
            await ctx.record_tool_result("call-1", 2, durable=False)
        after = log_of(store_url, "run-refused")
        assert after[: len(before)] == before
        assert [row[1] for row in after[len(before) :]] == ["tool_result"]
    finally:
        await ctx.close()
