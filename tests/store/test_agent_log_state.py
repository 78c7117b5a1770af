"""A run's fresh-context state and its open intents, read back on both backends: the tail
after the latest accepted checkpoint, short (read on the caller's thread) or long (read
again on a worker thread), and the intents a response left without results."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from zincir import DuplicateToolCall
from zincir.store import Store

TTL = timedelta(minutes=5)


async def test_state_is_the_tail_after_the_accepted_checkpoint(store: Store) -> None:
    lease = await store.create_run("r", name="r", owner="me", ttl=TTL)
    for n in range(3):
        await store.record_response(lease, json.dumps({"n": n}), [])
    proposed = await store.propose_checkpoint(lease, {"k": 1}, json.dumps({"k": 1}))
    decided = await store.decide_checkpoint(lease, proposed, True, {"ok": True})
    for n in range(300):  # longer than a read on the caller's thread takes
        await store.record_response(lease, json.dumps({"after": n}), [])

    state = await store.load_state("r")

    assert state.checkpoint is not None and state.checkpoint.decided_seq == decided
    assert state.checkpoint.candidate == {"k": 1} and state.checkpoint.evidence == {"ok": True}
    assert [event.payload for event in state.events] == [{"after": n} for n in range(300)]
    assert [event.seq for event in state.events] == list(range(decided + 1, decided + 301))
    assert state.last_seq == decided + 300 and state.status == "running"


async def test_a_short_tail_and_a_run_without_checkpoints(store: Store) -> None:
    lease = await store.create_run("r", name="r", owner="me", ttl=TTL)
    await store.record_response(lease, '{"m": 1}', [("c1", '{"tool": "a"}')])
    state = await store.load_state("r")
    assert state.checkpoint is None
    assert [event.type for event in state.events] == [
        "state_transition",
        "llm_call",
        "tool_call",
    ]
    assert await store.proposed_checkpoint("r") is None


async def test_open_intents_and_a_reused_call_id(store: Store) -> None:
    lease = await store.create_run("r", name="r", owner="me", ttl=TTL)
    await store.record_response(lease, "{}", [("c1", '{"i": 1}'), ("c2", '{"i": 2}')])
    await store.record_tool_result(lease, "c1", '{"done": 1}')
    assert await store.open_intents("r") == [{"i": 2}]
    before = (await store.load_state("r")).last_seq
    with pytest.raises(DuplicateToolCall):  # c1 was answered, c2 is open: both refused
        await store.record_response(lease, "{}", [("c3", "{}"), ("c1", "{}")])
    with pytest.raises(DuplicateToolCall):
        await store.record_response(lease, "{}", [("c2", "{}")])
    assert (await store.load_state("r")).last_seq == before  # nothing stored
    assert await store.open_intents("r") == [{"i": 2}]
