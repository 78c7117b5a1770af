"""AgentContext: every method, its guarantees and its typed errors on bad input."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import zincir
from tests.helpers import count, event_types, select, seqs
from zincir import (
    AgentContext,
    CheckpointCandidate,
    DuplicateToolCall,
    FencedOut,
    InvalidInput,
    InvalidLeaseTtl,
    LeaseHeld,
    LeaseLost,
    NotJsonSerializable,
    RunExists,
    RunNotFound,
    RunTerminal,
    SQLiteStore,
    ToolCall,
    UnknownToolCall,
    Verification,
)


async def accept(candidate: CheckpointCandidate) -> Verification:
    return Verification(True, {"checked": list(candidate.completed)})


async def reject(candidate: CheckpointCandidate) -> Verification:
    return Verification(False, {"reason": "missing artifact"})


async def test_create_records_run_and_transition(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="research", provider="p", config={"goal": "g"})
    try:
        run = await store.get_run(ctx.run_id)
        assert run is not None
        assert run["status"] == "running" and run["provider"] == "p"
        assert run["lease_owner"] == ctx.lease_owner and run["lease_token"] == ctx.lease_token == 1
        assert event_types(store_url, ctx.run_id) == ["state_transition"]
        events = await store.list_events(ctx.run_id)
        assert events[0].payload == {"from": "pending", "to": "running"}
    finally:
        await ctx.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "n", "lease_ttl": timedelta(milliseconds=29)}, InvalidLeaseTtl),
        ({"name": "n", "lease_ttl": 0.01}, InvalidLeaseTtl),
        ({"name": "n", "lease_ttl": "30s"}, InvalidLeaseTtl),
        ({"name": ""}, InvalidInput),
        ({"name": "n", "run_id": ""}, InvalidInput),
        ({"name": "n", "run_id": "a\x00b"}, InvalidInput),
        ({"name": "n", "run_id": "x" * 257}, InvalidInput),
        ({"name": "n", "config": {"f": object()}}, NotJsonSerializable),
        ({"name": "n", "config": {"x": float("nan")}}, NotJsonSerializable),
        ({"name": "n", "provider": 3}, InvalidInput),
    ],
)
async def test_create_rejects_bad_input_and_stores_nothing(
    store: SQLiteStore, store_url: str, kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await AgentContext.create(store, **kwargs)  # type: ignore[arg-type]
    assert count(store_url, "agent_runs") == 0
    assert count(store_url, "events") == 0


async def test_create_accepts_exactly_30ms(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", lease_ttl=timedelta(milliseconds=30))
    await ctx.close()


async def test_create_existing_id_raises(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="fixed")
    await ctx.close()
    with pytest.raises(RunExists) as raised:
        await AgentContext.create(store, name="other", run_id="fixed")
    assert raised.value.run_id == "fixed" and "fixed" in str(raised.value)
    assert seqs(store_url, "fixed") == [1]


async def test_recover_errors(store: SQLiteStore) -> None:
    with pytest.raises(RunNotFound) as missing:
        await AgentContext.recover(store, "nope")
    assert missing.value.run_id == "nope"
    ctx = await AgentContext.create(store, name="n")
    with pytest.raises(LeaseHeld):
        await AgentContext.recover(store, ctx.run_id)
    await ctx.complete()
    with pytest.raises(RunTerminal):
        await AgentContext.recover(store, ctx.run_id)
    with pytest.raises(RunTerminal):
        await AgentContext.force_recover(store, ctx.run_id)


async def test_recover_after_release_bumps_token(store: SQLiteStore, store_url: str) -> None:
    first = await AgentContext.create(store, name="n")
    await first.release()
    run = await store.get_run(first.run_id)
    assert run is not None and run["lease_owner"] is None and run["status"] == "running"
    second = await AgentContext.recover(store, first.run_id, lease_ttl=timedelta(seconds=5))
    assert second.lease_token == first.lease_token + 1
    third_token = None
    await second.close()
    third = await AgentContext.force_recover(store, first.run_id)
    third_token = third.lease_token
    await third.close()
    assert third_token == second.lease_token + 1


async def test_record_response_writes_llm_call_and_intents(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n")
    seq = await ctx.record_response(
        "calling tools",
        [ToolCall("a", "search", {"q": 1}), {"id": "b", "name": "fetch", "arguments": {}}],
        "tool_use",
        usage={"input_tokens": 10, "output_tokens": 5},
    )
    assert seq == 2
    assert event_types(store_url, ctx.run_id) == [
        "state_transition",
        "llm_call",
        "tool_call",
        "tool_call",
    ]
    events = await store.list_events(ctx.run_id, after_seq=1)
    assert events[0].payload["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert [c.id for c in await ctx.pending_tools()] == ["a", "b"]
    await ctx.close()


async def test_duplicate_tool_call_in_response_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n")
    with pytest.raises(DuplicateToolCall) as raised:
        await ctx.record_response("x", [ToolCall("a", "t"), ToolCall("a", "t")])
    assert raised.value.run_id == ctx.run_id
    assert seqs(store_url, ctx.run_id) == [1]
    await ctx.close()


async def test_duplicate_tool_call_across_responses_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n")
    await ctx.record_response("x", [ToolCall("a", "t")])
    with pytest.raises(DuplicateToolCall):
        await ctx.record_response("y", [ToolCall("b", "t"), ToolCall("a", "t")])
    assert event_types(store_url, ctx.run_id) == ["state_transition", "llm_call", "tool_call"]
    run = await store.get_run(ctx.run_id)
    assert run is not None and run["last_seq"] == 3
    await ctx.close()


@pytest.mark.parametrize(
    "calls",
    [
        [{"id": "a", "name": "t", "arguments": {}, "extra": 1}],
        [{"id": "", "name": "t", "arguments": {}}],
        [{"id": "a", "arguments": {}}],
        [{"id": "a", "name": "t", "arguments": [1]}],
        [{"id": "a", "name": "t", "arguments": {"f": object()}}],
        ["not a call"],
    ],
)
async def test_bad_tool_calls_rejected(
    store: SQLiteStore, store_url: str, calls: list[object]
) -> None:
    ctx = await AgentContext.create(store, name="n")
    with pytest.raises(InvalidInput):
        await ctx.record_response("x", calls)  # type: ignore[arg-type]
    assert seqs(store_url, ctx.run_id) == [1]
    await ctx.close()


async def test_tool_results(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="n")
    await ctx.record_response("x", [ToolCall("a", "t"), ToolCall("b", "t")])
    with pytest.raises(UnknownToolCall):
        await ctx.record_tool_result("zzz", 1)
    with pytest.raises(NotJsonSerializable):
        await ctx.record_tool_result("a", {"o": object()})  # a set would be stored as a list
    assert seqs(store_url, ctx.run_id) == [1, 2, 3, 4]
    await ctx.record_tool_result("b", {"ok": True})
    assert [c.id for c in await ctx.pending_tools()] == ["a"]
    with pytest.raises(DuplicateToolCall):
        await ctx.record_tool_result("b", {"ok": False})
    await ctx.record_tool_result("a", "done", is_error=False)
    assert await ctx.pending_tools() == []
    assert select(store_url, "SELECT COUNT(*) FROM events WHERE type='tool_result'")[0][0] == 2
    await ctx.close()


async def test_checkpoint_persists_candidate_before_verify(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n")
    await ctx.record_response("x")
    seen: list[list[tuple[object, ...]]] = []

    async def verify(candidate: CheckpointCandidate) -> Verification:
        seen.append(select(store_url, "SELECT status, lineage_seq FROM checkpoints"))
        return Verification(True, {"ok": 1})

    outcome = await ctx.checkpoint({"completed": ["a"], "remaining": ["b"]}, verify)
    assert seen == [[("proposed", 2)]]
    assert outcome.accepted and outcome.round == 1 and outcome.evidence == {"ok": 1}
    assert select(store_url, "SELECT status, evidence, decided_seq FROM checkpoints") == [
        ("accepted", '{"ok":1}', 4)
    ]
    assert event_types(store_url, ctx.run_id)[-2:] == ["checkpoint_proposed", "checkpoint_accepted"]
    await ctx.close()


async def test_rejected_checkpoint(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="n")
    outcome = await ctx.checkpoint(CheckpointCandidate(completed=["a"]), reject)
    assert not outcome.accepted
    assert event_types(store_url, ctx.run_id)[-1] == "checkpoint_rejected"
    assert (await ctx.state()).checkpoint is None
    await ctx.close()


async def test_interrupted_verification_is_pending_then_decided_once(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n")

    async def crash(candidate: CheckpointCandidate) -> Verification:
        raise RuntimeError("verifier died")

    with pytest.raises(RuntimeError):
        await ctx.checkpoint({"completed": ["a"]}, crash)
    pending = await ctx.pending_checkpoint()
    assert pending is not None and pending.candidate.completed == ("a",)
    with pytest.raises(zincir.CheckpointError):
        await ctx.checkpoint({"completed": ["different"]}, accept)
    outcome = await ctx.resume_checkpoint(accept)
    assert outcome is not None and outcome.accepted
    assert outcome.checkpoint_id == pending.checkpoint_id
    assert await ctx.pending_checkpoint() is None
    assert select(store_url, "SELECT COUNT(*) FROM checkpoints")[0][0] == 1
    assert event_types(store_url, ctx.run_id).count("checkpoint_accepted") == 1
    await ctx.close()


async def test_bad_checkpoint_input(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="n")
    with pytest.raises(InvalidInput):
        await ctx.checkpoint({"completed": [], "bogus": 1}, accept)
    with pytest.raises(NotJsonSerializable):
        await ctx.checkpoint({"completed": [object()]}, accept)

    async def wrong(candidate: CheckpointCandidate) -> Verification:
        return True  # type: ignore[return-value]

    with pytest.raises(InvalidInput):
        await ctx.checkpoint({"completed": ["a"]}, wrong)
    assert select(store_url, "SELECT status FROM checkpoints") == [("proposed",)]
    await ctx.close()


async def test_state_starts_from_latest_accepted_checkpoint(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", config={"goal": "g"})
    await ctx.record_response("round 1")
    await ctx.checkpoint({"completed": ["r1"], "remaining": ["r2"]}, accept)
    await ctx.record_response("round 2")
    await ctx.checkpoint({"completed": ["r1", "r2"], "remaining": ["r3"]}, accept)
    await ctx.record_response("round 3")
    await ctx.checkpoint({"completed": ["bad"]}, reject)
    state = await ctx.state()
    assert state.config == {"goal": "g"}
    assert state.checkpoint is not None and state.checkpoint.round == 2
    assert state.checkpoint.completed == ("r1", "r2")
    assert [e.type for e in state.events] == [
        "llm_call",
        "checkpoint_proposed",
        "checkpoint_rejected",
    ]
    assert state.events[0].payload["content"] == "round 3"
    assert all(e.seq > state.checkpoint.decided_seq for e in state.events)
    await ctx.close()


async def test_complete_clears_lease_and_blocks_writes(store: SQLiteStore, store_url: str) -> None:
    ctx = await AgentContext.create(store, name="n")
    await ctx.complete({"answer": 42})
    run = await store.get_run(ctx.run_id)
    assert run is not None
    assert (run["status"], run["lease_owner"], run["result"]) == (
        "completed",
        None,
        '{"answer":42}',
    )
    assert event_types(store_url, ctx.run_id)[-1] == "state_transition"
    with pytest.raises(RunTerminal):
        await ctx.record_response("late")
    await ctx.close()


async def test_heartbeat_keeps_lease_alive(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", lease_ttl=timedelta(milliseconds=60))
    await asyncio.sleep(0.3)
    with pytest.raises(LeaseHeld):
        await AgentContext.recover(store, ctx.run_id)
    await ctx.record_response("still mine")
    await ctx.close()


async def test_heartbeat_failure_raises_lease_lost_before_writing(
    store: SQLiteStore, store_url: str
) -> None:
    ctx = await AgentContext.create(store, name="n", lease_ttl=timedelta(milliseconds=60))
    thief = await AgentContext.force_recover(store, ctx.run_id)
    await asyncio.sleep(0.15)
    before = seqs(store_url, ctx.run_id)
    with pytest.raises(LeaseLost) as raised:
        await ctx.record_response("lost")
    assert raised.value.run_id == ctx.run_id
    assert seqs(store_url, ctx.run_id) == before
    await thief.close()
    await ctx.close()


async def test_paused_owner_is_fenced_out(store: SQLiteStore, store_url: str) -> None:
    old = await AgentContext.create(store, name="n", lease_ttl=timedelta(milliseconds=50))
    await old.record_response("before pause", [ToolCall("t1", "tool")])
    await old._heartbeat.stop()  # the process stalls: no renewals
    await asyncio.sleep(0.12)
    new = await AgentContext.recover(store, old.run_id)
    assert new.lease_token == old.lease_token + 1
    before = select(store_url, "SELECT seq, type, payload FROM events ORDER BY seq")
    for write in (
        old.record_response("after pause", [ToolCall("t2", "tool")]),
        old.record_tool_result("t1", "stale"),
        old.checkpoint({"completed": ["x"]}, accept),
        old.complete(),
    ):
        with pytest.raises(FencedOut):
            await write
    assert select(store_url, "SELECT seq, type, payload FROM events ORDER BY seq") == before
    assert count(store_url, "checkpoints") == 0
    run = await store.get_run(old.run_id)
    assert run is not None and run["status"] == "running" and run["lease_owner"] == new.lease_owner
    await new.record_tool_result("t1", "fresh")
    await new.close()
    await old.close()


async def test_two_contexts_race_for_one_run(store_target: str) -> None:
    """Two stores (two connections, as two processes would have) recover one run at once."""
    first_store = zincir.open_store(store_target)
    second_store = zincir.open_store(store_target)
    try:
        for _ in range(20):
            ctx = await AgentContext.create(first_store, name="race")
            await ctx.release()
            results = await asyncio.gather(
                AgentContext.recover(first_store, ctx.run_id),
                AgentContext.recover(second_store, ctx.run_id),
                return_exceptions=True,
            )
            winners = [r for r in results if isinstance(r, AgentContext)]
            losers = [r for r in results if isinstance(r, LeaseHeld)]
            assert len(winners) == 1 and len(losers) == 1, results
            await winners[0].close()
    finally:
        await first_store.close()
        await second_store.close()


async def test_release_lets_another_recover_immediately(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", lease_ttl=timedelta(seconds=60))
    await ctx.close()
    await ctx.close()
    again = await AgentContext.recover(store, ctx.run_id)
    assert (await store.get_run(ctx.run_id) or {})["status"] == "running"
    await again.close()


async def test_errors_name_the_run(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="run-42")
    with pytest.raises(DuplicateToolCall, match=r"\[run run-42\]"):
        await ctx.record_response("x", [ToolCall("a", "t"), ToolCall("a", "t")])
    await ctx.close()


async def test_oversized_payloads_are_refused_before_any_write(
    store: SQLiteStore, store_url: str
) -> None:
    from zincir._json import MAX_DOCUMENT_BYTES

    huge = "x" * (MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(zincir.PayloadTooLarge):
        await AgentContext.create(store, name="n", config={"blob": huge})
    assert count(store_url, "agent_runs") == 0
    ctx = await AgentContext.create(store, name="n")
    await ctx.record_response("x", [ToolCall("a", "t")])
    before = select(store_url, "SELECT seq, payload FROM events ORDER BY seq")
    with pytest.raises(zincir.PayloadTooLarge, match="limit") as raised:
        await ctx.record_response(huge)
    assert raised.value.run_id == ctx.run_id
    with pytest.raises(zincir.PayloadTooLarge):
        await ctx.record_tool_result("a", huge)
    with pytest.raises(zincir.PayloadTooLarge):
        await ctx.checkpoint({"completed": [huge]}, accept)
    assert select(store_url, "SELECT seq, payload FROM events ORDER BY seq") == before
    assert [call.id for call in await ctx.pending_tools()] == ["a"]
    await ctx.record_response("é" * (MAX_DOCUMENT_BYTES // 4))  # under the limit in bytes
    await ctx.close()
