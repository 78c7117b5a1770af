"""LangGraph checkpoints and thread leases on PostgreSQL under real concurrency: stores with
their own pools (as separate processes would have) race for a thread's lease, write under a
lease being taken over, copy onto one new thread and prune while checkpoints arrive; and the
listing answers exactly as SQLite's does."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from zincir import FencedOut, InvalidInput, LeaseHeld
from zincir.store import (
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    NewGraphCheckpoint,
    Store,
    ThreadLease,
    _langgraph,
)
from zincir.store.postgres import PostgresStore
from zincir.testing import FakeClock

TTL = timedelta(seconds=30)


@pytest.fixture
async def stores(postgres_url: str, clock: FakeClock) -> AsyncIterator[list[PostgresStore]]:
    """Eight stores on one schema sharing one pinned clock."""
    opened = [PostgresStore(postgres_url, clock=clock, pool_size=3) for _ in range(8)]
    yield opened
    for store in opened:
        await store.close()


def _checkpoint(
    thread: str, checkpoint_id: str, parent: str | None = None, *, ns: str = "", **meta: Any
) -> NewGraphCheckpoint:
    return NewGraphCheckpoint(
        thread, ns, checkpoint_id, parent, "json", checkpoint_id.encode(), json.dumps(meta)
    )


def _write(task: str, idx: int, value: str, path: str = "") -> GraphWrite:
    return GraphWrite(task, idx, "ch", "json", value.encode(), path)


async def _outcomes(*calls: Awaitable[object]) -> list[object]:
    """What each call returned or raised."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def _ids(store: Store, thread: str) -> list[str]:
    rows = await store.list_graph_checkpoints(GraphCheckpointQuery(thread_id=thread))
    return [row.checkpoint_id for row in rows]


# -- thread leases ----------------------------------------------------------------------


async def test_owners_racing_for_a_thread_get_one_lease_and_the_token_only_grows(
    stores: list[PostgresStore], clock: FakeClock
) -> None:
    """Eight owners take the same thread at once, round after round: one wins, the others
    see its live lease (LeaseHeld); after it expires or is released the next winner gets the
    next token; forced takeovers racing each get a distinct, larger token."""
    token = 0
    for round_no in range(12):
        outcomes = await _outcomes(
            *(
                store.acquire_thread_lease("t", owner=f"o{round_no}.{n}", ttl=TTL)
                for n, store in enumerate(stores)
            )
        )
        won = [lease for lease in outcomes if isinstance(lease, ThreadLease)]
        assert len(won) == 1, outcomes
        assert all(isinstance(lost, LeaseHeld) for lost in outcomes if lost not in won)
        assert won[0].token == token + 1
        token = won[0].token
        if round_no % 2:
            clock.advance(TTL.total_seconds() + 1)
        else:
            assert await stores[round_no % 8].release_thread_lease(won[0])

    forced = await _outcomes(
        *(
            store.acquire_thread_lease("t", owner=f"f{n}", ttl=TTL, force=True)
            for n, store in enumerate(stores)
        )
    )
    leases = [lease for lease in forced if isinstance(lease, ThreadLease)]
    assert sorted(lease.token for lease in leases) == list(range(token + 1, token + 9))
    newest = max(leases, key=lambda lease: lease.token)
    for lease in leases:
        assert await stores[0].renew_thread_lease(lease) is (lease is newest)


async def test_a_thread_nobody_leased_yet_is_won_once(stores: list[PostgresStore]) -> None:
    """No lease row exists yet, so there is no row to lock: the advisory lock still lets
    exactly one of eight owners insert the thread's first lease."""
    for n in range(10):
        outcomes = await _outcomes(
            *(
                store.acquire_thread_lease(f"new{n}", owner=f"o{k}", ttl=TTL)
                for k, store in enumerate(stores)
            )
        )
        won = [lease for lease in outcomes if isinstance(lease, ThreadLease)]
        assert [lease.token for lease in won] == [1], outcomes


# -- fencing ----------------------------------------------------------------------------


async def test_a_fenced_writer_stores_nothing(stores: list[PostgresStore]) -> None:
    """Once another owner took the thread, every write under the old lease raises FencedOut
    and leaves the thread as it was."""
    mine, theirs = stores[0], stores[1]
    old = await mine.acquire_thread_lease("t", owner="me", ttl=TTL)
    await mine.put_graph_checkpoint(_checkpoint("t", "c1"), lease=old)
    await mine.put_graph_writes("t", "", "c1", [_write("task", 0, "kept")], lease=old)
    await mine.put_graph_checkpoint(_checkpoint("other", "o1"))
    new = await theirs.acquire_thread_lease("t", owner="them", ttl=TTL, force=True)
    assert new.token == old.token + 1

    fenced = await _outcomes(
        mine.put_graph_checkpoint(_checkpoint("t", "c2", "c1"), lease=old),
        mine.put_graph_checkpoint(_checkpoint("t", "c1", step=9), lease=old),
        mine.put_graph_writes("t", "", "c1", [_write("task", 0, "new")], lease=old),
        mine.put_graph_writes("t", "", "c1", [_write("late", -1, "error")], lease=old),
        mine.delete_graph_thread("t", lease=old),
        mine.copy_graph_thread("other", "t2", lease=ThreadLease("t2", "me", 1, TTL)),
        mine.prune_graph_threads(["t"], keep_latest=False, leases=[old]),
    )
    assert all(isinstance(error, FencedOut) for error in fenced), fenced
    assert "superseded by 2" in str(fenced[0])
    assert "released or never taken" in str(fenced[5])
    row = await theirs.get_graph_checkpoint("t", "")
    assert row is not None and row.checkpoint_id == "c1" and row.metadata_json == "{}"
    assert row.writes == (_write("task", 0, "kept"),)
    assert await _ids(theirs, "t2") == []
    with pytest.raises(LeaseHeld, match="leased by them"):
        await mine.put_graph_checkpoint(_checkpoint("t", "c3"))


async def test_writes_racing_a_takeover_are_stored_exactly_when_they_succeed(
    stores: list[PostgresStore],
) -> None:
    """Sixty writes under a lease run at once while another store forces the thread over:
    each write either commits (and is stored) or raises FencedOut (and stores nothing),
    none succeeds after the takeover returned, and the takeover's token is the next one."""
    holder, taker = stores[0], stores[1]
    old = await holder.acquire_thread_lease("t", owner="holder", ttl=TTL)
    await holder.put_graph_checkpoint(_checkpoint("t", "base"), lease=old)
    writers = stores[2:]
    some_done = asyncio.Event()  # the takeover lands once a few writes have committed
    committed = 0

    def one_more() -> None:
        nonlocal committed
        committed += 1
        if committed >= 5:
            some_done.set()

    async def checkpoint(n: int) -> str:
        await asyncio.sleep(n * 0.004)  # spread out, so the takeover lands among them
        await writers[n % len(writers)].put_graph_checkpoint(
            _checkpoint("t", f"c{n:03}", "base"), lease=old
        )
        one_more()
        return f"c{n:03}"

    async def writes(n: int) -> str:
        await asyncio.sleep(n * 0.004)
        await writers[n % len(writers)].put_graph_writes(
            "t",
            "",
            "base",
            [_write(f"task{n:03}", 0, "v"), _write(f"task{n:03}", -1, "e")],
            lease=old,
        )
        one_more()
        return f"task{n:03}"

    async def take_over() -> ThreadLease:
        await some_done.wait()
        return await taker.acquire_thread_lease("t", owner="taker", ttl=TTL, force=True)

    outcomes = await _outcomes(
        *(checkpoint(n) for n in range(30)), *(writes(n) for n in range(30)), take_over()
    )
    new = outcomes[-1]
    assert isinstance(new, ThreadLease) and new.token == old.token + 1
    done = [name for name in outcomes[:-1] if isinstance(name, str)]
    refused = [error for error in outcomes[:-1] if not isinstance(error, str)]
    assert all(isinstance(error, FencedOut) for error in refused), refused
    assert done and refused, "the takeover should land in the middle of the writes"

    stored = set(await _ids(taker, "t")) - {"base"}
    base = await taker.get_graph_checkpoint("t", "", "base")
    assert base is not None
    assert stored == {name for name in done if name.startswith("c")}
    tasks = {write.task_id for write in base.writes}
    assert tasks == {name for name in done if name.startswith("task")}
    assert len(base.writes) == 2 * len(tasks)  # a task's writes commit together or not at all

    after = await _outcomes(checkpoint(99), writes(99))
    assert all(isinstance(error, FencedOut) for error in after)


async def test_unleased_writes_racing_an_acquire_stop_at_the_lease(
    stores: list[PostgresStore],
) -> None:
    """Writes without a lease race an owner taking the thread: each either commits or raises
    LeaseHeld and stores nothing; once the lease is taken every one is refused."""
    owner = stores[0]

    async def put(n: int) -> str:
        await stores[1 + n % 7].put_graph_checkpoint(_checkpoint("t", f"c{n:03}"))
        return f"c{n:03}"

    async def take() -> ThreadLease:
        await asyncio.sleep(0.01)
        return await owner.acquire_thread_lease("t", owner="owner", ttl=TTL)

    outcomes = await _outcomes(*(put(n) for n in range(40)), take())
    assert isinstance(outcomes[-1], ThreadLease)
    done = {name for name in outcomes[:-1] if isinstance(name, str)}
    assert all(isinstance(error, LeaseHeld) for error in outcomes[:-1] if error not in done)
    assert set(await _ids(owner, "t")) == done
    late = await _outcomes(put(98), put(99))
    assert all(isinstance(error, LeaseHeld) for error in late)


def _pause_after(
    monkeypatch: pytest.MonkeyPatch, name: str, seconds: float, when: Any = None
) -> None:
    """Hold the transaction that calls the module's ``name`` open ``seconds`` after it
    (``when(*args)``: only for those calls), so another store meets its locks."""
    original = getattr(_langgraph, name)

    def paused(*args: Any) -> Any:
        result = original(*args)
        if when is None or when(*args):
            time.sleep(seconds)
        return result

    monkeypatch.setattr(_langgraph, name, paused)


async def test_an_unleased_write_waits_for_an_acquire_in_flight(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write without a lease meets a first acquire of the thread still in its transaction
    (no lease row to lock yet): it waits for the commit and is refused (LeaseHeld)."""
    _pause_after(monkeypatch, "_acquire", 0.4)
    taking = asyncio.ensure_future(stores[0].acquire_thread_lease("t", owner="o", ttl=TTL))
    await asyncio.sleep(0.15)
    with pytest.raises(LeaseHeld, match="leased by o"):
        await stores[1].put_graph_checkpoint(_checkpoint("t", "c1"))
    assert (await taking).token == 1
    assert await _ids(stores[1], "t") == []


async def test_a_holder_reviving_its_lease_waits_for_an_unleased_write_in_flight(
    stores: list[PostgresStore], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write without a lease passed its fence on an expired lease: the holder's write,
    which revives that lease, waits for it to commit (the lease row is locked FOR SHARE),
    so the unleased write is never stored under a live lease."""
    holder = stores[0]
    lease = await holder.acquire_thread_lease("t", owner="holder", ttl=TTL)
    clock.advance(TTL.total_seconds() + 1)
    _pause_after(monkeypatch, "_fence", 0.4, when=lambda conn, thread, lease: lease is None)
    finished: list[str] = []

    async def put(store: PostgresStore, name: str, held: ThreadLease | None) -> None:
        await store.put_graph_checkpoint(_checkpoint("t", name), lease=held)
        finished.append(name)

    unleased = asyncio.ensure_future(put(stores[1], "unleased", None))
    await asyncio.sleep(0.15)
    await put(holder, "holder", lease)
    await unleased
    assert finished == ["unleased", "holder"]


# -- copy, prune and delete racing -------------------------------------------------------


async def test_copies_racing_onto_one_new_thread_leave_one_source(
    stores: list[PostgresStore],
) -> None:
    """Eight stores copy eight threads onto the same new thread at once: one copy wins, the
    others find checkpoints there (InvalidInput) and the target holds one source only."""
    for n in range(8):
        await stores[0].put_graph_checkpoint(_checkpoint(f"s{n}", "a"))
        await stores[0].put_graph_checkpoint(_checkpoint(f"s{n}", f"b{n}", "a"))
        await stores[0].put_graph_writes(f"s{n}", "", f"b{n}", [_write(f"task{n}", 0, "v")])
    for round_no in range(5):
        target = f"dst{round_no}"
        outcomes = await _outcomes(
            *(store.copy_graph_thread(f"s{n}", target) for n, store in enumerate(stores))
        )
        won = [n for n, copied in enumerate(outcomes) if copied == 2]
        assert len(won) == 1, outcomes
        assert all(
            isinstance(error, InvalidInput) and "already has checkpoints" in str(error)
            for n, error in enumerate(outcomes)
            if n not in won
        )
        assert await _ids(stores[0], target) == [f"b{won[0]}", "a"]
        row = await stores[0].get_graph_checkpoint(target, "")
        assert row is not None and [w.task_id for w in row.writes] == [f"task{won[0]}"]


async def test_pruning_while_checkpoints_arrive_keeps_the_newest(
    stores: list[PostgresStore],
) -> None:
    """Checkpoints keep arriving on a thread while other stores prune it to its newest: a
    prune never deletes a checkpoint newer than the one it kept, so the newest stays."""
    writer = stores[0]
    await writer.put_graph_checkpoint(_checkpoint("t", "c0000"))
    parent = "c0000"
    for n in range(1, 41):
        newest = f"c{n:04}"
        outcomes = await _outcomes(
            writer.put_graph_checkpoint(_checkpoint("t", newest, parent)),
            writer.put_graph_writes("t", "", newest, [_write("task", 0, "v")]),
            *(store.prune_graph_threads(["t"], keep_latest=True) for store in stores[1:4]),
        )
        assert not [error for error in outcomes if isinstance(error, BaseException)], outcomes
        found = await writer.get_graph_checkpoint("t", "")
        assert found is not None and found.checkpoint_id == newest
        parent = newest
    await writer.prune_graph_threads(["t"], keep_latest=True)
    assert await _ids(writer, "t") == ["c0040"]


async def test_deleting_runs_while_their_threads_are_leased_is_fenced_as_a_whole(
    stores: list[PostgresStore],
) -> None:
    """delete_graph_runs fences every thread it touches: a live lease on one of them refuses
    the whole delete; with that lease it deletes in every thread."""
    store = stores[0]
    for thread in ("a", "b"):
        await store.put_graph_checkpoint(
            NewGraphCheckpoint(thread, "", "c1", None, "json", b"1", "{}", run_id="run-1")
        )
    lease = await stores[1].acquire_thread_lease("b", owner="b-owner", ttl=TTL)
    with pytest.raises(LeaseHeld, match="thread 'b'"):
        await store.delete_graph_runs(["run-1"])
    assert await _ids(store, "a") == ["c1"]
    assert await stores[1].delete_graph_runs(["run-1"], leases=[lease]) == 2
    assert await _ids(store, "a") == [] and await _ids(store, "b") == []


# -- the same answers as SQLite ---------------------------------------------------------

METADATA: list[dict[str, Any]] = [
    {"step": 1, "flag": True, "score": 1, "tag": "a", "info": {"x": 1, "y": [2]}},
    {"step": 2, "flag": False, "score": 1.0, "tag": "1"},
    {"step": 3, "score": None, "tag": "a\x00b", "k\x00": 1},
    {"step": 4, "tag": "lone \ud800", "info": {"x": 1, "y": [2]}},
    {"step": 5, "info": {"y": [2], "x": 1}, "big": 10**16},
    {"step": 6, "big": 1e16, "tag": "é"},
]
FILTERS: list[dict[str, Any]] = [
    {},
    {"flag": True},
    {"flag": False},
    {"score": 1},
    {"score": True},
    {"score": None},
    {"missing": None},
    {"tag": "a"},
    {"tag": 1},
    {"tag": "1"},
    {"tag": "a\x00b"},
    {"tag": "é"},
    {"info": {"x": 1, "y": [2]}},
    {"info": {"y": [2], "x": 1}},
    {"info": None},
    {"big": 10**16},
    {"step": 4, "info": {"x": 1, "y": [2]}},
    {"step": 2.0},
    {"odd key\"'.$": 1},
    {"k\x00": 1},
    {"k\x00": None},
    {"k\x00": 2},
    {"score": float("inf")},
]


def _metadata_text(meta: dict[str, Any]) -> str:
    """As the saver stores metadata: sorted keys, escaped only if UTF-8 cannot hold it."""
    try:
        text = json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    return text


async def _fill(store: Store) -> None:
    ids = ["a-b", "aB", "ab", "a_b", "é", "Z", "a b", "a"]
    for n, meta in enumerate(METADATA):
        await store.put_graph_checkpoint(
            NewGraphCheckpoint(
                "t", "", ids[n], None, "json", b"{}", _metadata_text(meta), run_id=None
            )
        )
        await store.put_graph_writes(
            "t",
            "",
            ids[n],
            [
                _write("tB", 1, "x", "p"),
                _write("ta", 0, "y", "p"),
                _write("tA", -3, "z", "P"),
                _write("t-a", 0, "w", "p"),
            ],
        )
    await store.put_graph_checkpoint(_checkpoint("u", "a", ns="x-y"))
    await store.put_graph_checkpoint(_checkpoint("u", "a", ns="xY"))


def _shown(rows: list[GraphCheckpointRow]) -> list[tuple[str, ...]]:
    return [
        (row.thread_id, row.checkpoint_ns, row.checkpoint_id, *(w.task_id for w in row.writes))
        for row in rows
    ]


async def test_listing_answers_as_sqlite_does(
    postgres_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Filters by JSON type and value, byte-order ids, pages and limits give the same rows
    (and writes in the same order) on both backends, metadata PostgreSQL's JSON parser
    refuses (a \\u0000, a lone surrogate) included."""
    sqlite = zincir.open_store(tmp_path / "z.db", clock=clock)
    postgres = PostgresStore(postgres_url, clock=clock)
    try:
        for store in (sqlite, postgres):
            await _fill(store)
        queries = [GraphCheckpointQuery(thread_id="t", metadata=tuple(f.items())) for f in FILTERS]
        queries += [
            GraphCheckpointQuery(),
            GraphCheckpointQuery(limit=3),
            GraphCheckpointQuery(limit=0),
            GraphCheckpointQuery(thread_id="t", before_id="aB"),
            GraphCheckpointQuery(after=("aB", "t", ""), limit=2),
            GraphCheckpointQuery(checkpoint_ns="x-y"),
            GraphCheckpointQuery(metadata=(("step", 3),), limit=1),
            GraphCheckpointQuery(metadata=(("big", 1e16),), limit=1),
            GraphCheckpointQuery(metadata=(("info", {"x": 1, "y": [2]}),), limit=1),
        ]
        for query in queries:
            expected = _shown(await sqlite.list_graph_checkpoints(query))
            assert _shown(await postgres.list_graph_checkpoints(query)) == expected, query
        for got in (sqlite, postgres):
            row = await got.get_graph_checkpoint("t", "")
            assert row is not None and row.checkpoint_id == "é"
        for store in (sqlite, postgres):
            with pytest.raises(InvalidInput, match="a JSON value is needed"):
                await store.list_graph_checkpoints(GraphCheckpointQuery(metadata=(("k", {1}),)))
            with pytest.raises(InvalidInput, match="cannot be stored"):
                await store.list_graph_checkpoints(
                    GraphCheckpointQuery(metadata=(("tag", "lone \ud800"),))
                )
    finally:
        await sqlite.close()
        await postgres.close()


async def test_pruning_reads_metadata_the_json_parser_refuses(
    stores: list[PostgresStore],
) -> None:
    """The delta-channel depth is read in Python, so a newest checkpoint whose metadata
    holds a \\u0000 still prunes, keeping the chain its counters name."""
    store = stores[0]
    parent = None
    for n in range(4):
        await store.put_graph_checkpoint(_checkpoint("t", f"c{n}", parent, step=n))
        parent = f"c{n}"
    meta = {"note": "nul \x00", "counters_since_delta_snapshot": {"m": [3, 2], "o": [1, 1]}}
    await store.put_graph_checkpoint(
        NewGraphCheckpoint("t", "", "c4", "c3", "json", b"{}", json.dumps(meta))
    )
    assert await store.prune_graph_threads(["t"], keep_latest=True) == 2
    assert await _ids(store, "t") == ["c4", "c3", "c2"]
