"""Encryption at rest of the store's core families, on every backend: runs (config, result,
last error), the event log (its long strings stored as content), semantic checkpoints,
compaction's archive, forks, step results and operations with long inputs. The APIs return
plaintext; the columns, read raw, hold only sealed values; a store reopened with the key
replays, one opened without it is refused."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.helpers import select
from tests.store import content_agent
from zincir import EncryptionKeyMissing
from zincir._encryption import KEYS_ENV
from zincir.store import NewEvent, Store

pytest.importorskip("cryptography", reason="encryption at rest needs the crypto extra")

TTL = timedelta(seconds=30)
CANARY = "canary-51c0-core-do-not-store"
LONG = (CANARY + " ") * 120  # an llm_call's or tool_result's long string: a content piece
KEYS = zincir.Encryption({"core-1": bytes(range(1, 33))}, "core-1")


@pytest.fixture(autouse=True)
def _no_keys_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys are given explicitly here: a store opened without them is opened without any."""
    monkeypatch.delenv(KEYS_ENV, raising=False)


def sealed(value: object, canary: str = CANARY) -> bool:
    """Whether a raw column value is a sealed envelope in its stored form, without
    ``canary`` in clear."""
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, str):
        return value.startswith("zs1:") and canary not in value
    return isinstance(value, bytes) and value.startswith(b"zs1") and canary.encode() not in value


def raw(target: str, query: str) -> list[Any]:
    """Every non-NULL value of a one-column SELECT, read past zincir (no key)."""
    return [row[0] for row in select(target, query) if row[0] is not None]


def all_sealed(target: str, columns: dict[str, tuple[str, ...]], canary: str = CANARY) -> None:
    """Every non-NULL value of each table's columns is sealed (and there is at least one)."""
    for table, names in columns.items():
        for column in names:
            values = raw(target, f"SELECT {column} FROM {table}")
            assert values, f"{table}.{column} holds nothing to check"
            unsealed = [value for value in values if not sealed(value, canary)]
            assert not unsealed, f"{table}.{column}: {unsealed[:1]!r}"


async def _history(store: Store) -> None:
    """Run r1 through a response with a long reply and an intent, its long result, an
    accepted checkpoint, more events, compaction and a result; r2 fails, r3 is cancelled."""
    lease = await store.create_run(
        "r1", name="core", owner="me", ttl=TTL, config_json=json.dumps({"secret": CANARY})
    )
    await store.append_events(lease, [NewEvent("note", json.dumps({"text": CANARY}))])
    await store.record_response(
        lease, json.dumps({"reply": LONG}), [("c1", json.dumps({"arg": CANARY}))]
    )
    await store.record_tool_result(lease, "c1", json.dumps({"out": LONG}))
    await store.record_response(lease, json.dumps({"reply": "again"}), [("c2", '{"n": 2}')])
    proposed = await store.propose_checkpoint(
        lease, {"summary": CANARY}, json.dumps({"summary": CANARY})
    )
    await store.decide_checkpoint(lease, proposed, True, {"why": CANARY})
    await store.append_events(lease, [NewEvent("note", json.dumps({"after": CANARY}))])
    report = await store.compact_run("r1", max_events=2)
    assert report.archived > 0 and report.kept == 1  # c2's intent waits for its result
    claim = await store.claim_step(lease, "s1")
    assert claim.status == "claimed"
    await store.finish_step(lease, "s1", json.dumps({"step": CANARY}))
    await store.finish_run(lease, "completed", result_json=json.dumps({"answer": CANARY}))
    failing = await store.create_run("r2", name="core", owner="me", ttl=TTL)
    await store.finish_run(failing, "failed", error=f"boom: {CANARY}")
    await store.create_run("r3", name="core", owner="me", ttl=TTL)
    await store.cancel_run("r3", reason=CANARY)


async def _check_history(store: Store, fork_id: str) -> None:
    """Every API reads r1, r2, r3 and the fork in plaintext."""
    r1 = await store.get_run("r1")
    assert r1 is not None and json.loads(r1["config"]) == {"secret": CANARY}
    assert r1["result"] is not None and json.loads(r1["result"]) == {"answer": CANARY}
    r2, r3 = await store.get_run("r2"), await store.get_run("r3")
    assert r2 is not None and r2["last_error"] == f"boom: {CANARY}"
    assert r3 is not None and r3["last_error"] == f"cancelled: {CANARY}"
    listed = {run["id"]: run for run in await store.list_runs()}
    assert listed["r1"]["config"] == r1["config"] and listed["r2"]["last_error"] == r2["last_error"]
    events = await store.list_events("r1")
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    by_type: dict[str, list[Any]] = {}
    for event in events:
        by_type.setdefault(event.type, []).append(event.payload)
    assert by_type["llm_call"] == [{"reply": LONG}, {"reply": "again"}]
    assert by_type["tool_result"] == [{"out": LONG}]
    assert by_type["note"] == [{"text": CANARY}, {"after": CANARY}]
    assert by_type["step_completed"][0]["result"] == {"step": CANARY}
    state = await store.load_state("r1")
    assert state.checkpoint is not None and state.checkpoint.candidate == {"summary": CANARY}
    assert state.checkpoint.evidence == {"why": CANARY} and state.config == {"secret": CANARY}
    assert any(e.payload == {"after": CANARY} for e in state.events)
    fork = await store.get_run(fork_id)
    assert fork is not None and fork["config"] == r1["config"]
    copied = await store.list_events(fork_id)
    assert copied[-1].type == "checkpoint_accepted"
    assert [(e.seq, e.type, e.payload) for e in copied] == [
        (e.seq, e.type, e.payload) for e in events[: len(copied)]
    ]
    assert await store.open_intents(fork_id) == [{"n": 2}]  # unarchived by the fork


async def test_runs_log_checkpoints_archive_and_forks_are_sealed(store_target: str) -> None:
    store = zincir.open_store(store_target, encryption=KEYS)
    try:
        await _history(store)
        events = await store.list_events("r1")
        at = next(e.seq for e in events if e.type == "checkpoint_accepted") + 1
        fork_id = await zincir.fork_run(store, "r1", at_seq=at, run_id="r1-fork")
        await _check_history(store, fork_id)
        lease = await store.acquire_run(fork_id, owner="f", ttl=TTL)
        assert (await store.claim_step(lease, "s1")).status == "claimed"  # after the point
    finally:
        await store.close()
    all_sealed(
        store_target,
        {
            "agent_runs": ("config", "result", "last_error"),
            "events": ("payload",),
            "archived_events": ("payload",),
            "checkpoints": ("state", "evidence"),
            "content": ("body",),
        },
    )
    assert select(store_target, "SELECT count(*) FROM content")[0][0] == 1  # LONG, stored once
    assert raw(store_target, "SELECT result FROM steps") == []  # the view cannot open it
    again = zincir.open_store(store_target, encryption=KEYS)
    try:
        await _check_history(again, fork_id)
        assert await again.list_events("r1") == events
    finally:
        await again.close()
    with pytest.raises(EncryptionKeyMissing):
        zincir.open_store(store_target)


async def test_a_stored_step_result_is_read_back_open(store_target: str) -> None:
    store = zincir.open_store(store_target, encryption=KEYS)
    try:
        lease = await store.create_run("w", name="workflow", owner="me", ttl=TTL)
        assert (await store.claim_step(lease, "a")).status == "claimed"
        assert await store.finish_step_and_claim(lease, "a", json.dumps([CANARY]), "b")
        await store.finish_step(lease, "b", json.dumps({"b": CANARY}))
        first, second = await store.claim_step(lease, "a"), await store.claim_step(lease, "b")
        assert (first.status, first.result) == ("completed", [CANARY])
        assert (second.status, second.result) == ("completed", {"b": CANARY})
    finally:
        await store.close()
    all_sealed(store_target, {"events": ("payload",)})


async def test_operations_with_long_inputs_are_sealed_and_replay(store_target: str) -> None:
    """A conversation whose requests grow past many content pieces: its operations' inputs,
    descriptions and records, its events and content are sealed; reopened with the key, the
    run replays to the same answer calling neither the model nor the tool."""
    marker = "all in stock"  # in every tool result, so in every later request's input
    store = zincir.open_store(store_target, encryption=KEYS)
    try:
        result = await content_agent.run_on(store, "long", 6, size=2048)
        assert result.output == "read 6 sections"
    finally:
        await store.close()
    all_sealed(
        store_target,
        {
            "operations": ("input_json", "input_parts", "record"),
            "events": ("payload",),
            "content": ("body",),
            "agent_runs": ("config",),
        },
        canary=marker,
    )
    called: list[str] = []
    again = zincir.open_store(store_target, encryption=KEYS)
    try:
        replayed = await content_agent.run_on(again, "long", 6, called.append, size=2048)
    finally:
        await again.close()
    assert replayed.output == "read 6 sections" and called == []


async def test_a_failed_attempts_error_is_sealed_and_fails_the_run_when_spent(
    store_target: str,
) -> None:
    def no_wait(attempt: int) -> timedelta:
        return timedelta(0)

    store = zincir.open_store(store_target, encryption=KEYS)
    try:
        await store.release_lease(await store.create_run("a", name="w", owner="me", ttl=TTL))
        (lease,) = await store.claim_runs("w1", TTL, 5, max_attempts=1, backoff=no_wait)
        await store.settle_attempt(lease, f"err: {CANARY}", max_attempts=2, backoff=no_wait)
        await store.release_lease(lease)  # its one attempt spent: the next claim fails it
        assert await store.claim_runs("w2", TTL, 5, max_attempts=1, backoff=no_wait) == []
        run = await store.get_run("a")
        assert run is not None and (run["status"], run["last_error"]) == (
            "failed",
            f"err: {CANARY}",
        )
        failed = [e for e in await store.list_events("a") if e.type == "attempt_failed"]
        assert failed[0].payload["error"] == f"err: {CANARY}"
    finally:
        await store.close()
    all_sealed(store_target, {"agent_runs": ("config", "last_error"), "events": ("payload",)})
