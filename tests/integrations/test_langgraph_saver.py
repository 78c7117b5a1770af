"""ZincirSaver and AsyncZincirSaver beyond the conformance suite: graphs run from plain
threads, JSON first and never pickle, fenced threads, list filters and pages, the extended
operations, the ordering of writes and checkpoints, and bad input, on real SQLite files (and
on PostgreSQL schemas when $ZINCIR_TEST_BACKENDS names postgres)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import pickle
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypedDict
from uuid import uuid4

import pytest

pytest.importorskip("langgraph", reason="LangGraph is in the dev extra")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

import zincir  # noqa: E402
from tests.conftest import BACKENDS  # noqa: E402
from zincir.integrations.langgraph import (  # noqa: E402
    AsyncZincirSaver,
    ZincirSaver,
    ZincirSerializer,
)
from zincir.store import NewGraphCheckpoint  # noqa: E402
from zincir.testing import FakeClock  # noqa: E402

# -- helpers ----------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the saver's store lives: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "graph.db")


def fast(db: str) -> Literal["full", "normal"]:
    """SQLite's faster commits for these tests; a PostgreSQL URL takes SQLite's default only."""
    return "full" if db.startswith("postgresql://") else "normal"


@pytest.fixture
def saver(db: str) -> Iterator[ZincirSaver]:
    with ZincirSaver.from_conn_string(db, synchronous=fast(db)) as opened:
        yield opened


def cfg(thread: str, checkpoint_id: str | None = None, ns: str | None = "") -> Any:
    inner: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        inner["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        inner["checkpoint_id"] = checkpoint_id
    return {"configurable": inner}


def checkpoint(**values: Any) -> Checkpoint:
    made = empty_checkpoint()
    made["id"] = str(uuid6(clock_seq=-1))
    made["channel_values"] = values
    made["channel_versions"] = dict.fromkeys(values, 1)
    return made


def meta(step: int = 0, **extra: Any) -> CheckpointMetadata:
    return {"source": "loop", "step": step, "parents": {}, **extra}  # type: ignore[typeddict-item]


def chain(saver: Any, thread: str, n: int, ns: str = "", **extra: Any) -> list[str]:
    """``n`` checkpoints on one thread, each the parent of the next; their ids."""
    ids: list[str] = []
    for step in range(n):
        made = checkpoint(step=step)
        saver.put(cfg(thread, ids[-1] if ids else None, ns), made, meta(step, **extra), {})
        ids.append(made["id"])
    return ids


def ids_of(tuples: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in tuples]


class Counter(TypedDict):
    n: int
    trail: list[str]


def counter_graph(steps: int) -> StateGraph[Counter, None, Counter, Counter]:
    def bump(state: Counter) -> Counter:
        return {"n": state["n"] + 1, "trail": [*state["trail"], f"s{state['n']}"]}

    builder = StateGraph(Counter)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_conditional_edges("bump", lambda s: "bump" if s["n"] < steps else END)
    return builder


# -- graphs on the sync saver, from plain threads ---------------------------------------


def test_graphs_run_from_plain_threads_on_one_sync_saver(saver: ZincirSaver) -> None:
    graph = counter_graph(5).compile(checkpointer=saver)
    errors: list[BaseException] = []

    def run(thread: str) -> None:
        try:
            out = graph.invoke({"n": 0, "trail": []}, {"configurable": {"thread_id": thread}})
            assert out == {"n": 5, "trail": [f"s{i}" for i in range(5)]}
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    workers = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for i in range(8):
        state = graph.get_state({"configurable": {"thread_id": f"t{i}"}})
        assert state.values["n"] == 5 and state.next == ()
        history = list(saver.list(cfg(f"t{i}")))
        assert [t.metadata["step"] for t in history] == list(range(5, -2, -1))


def test_on_sqlite_sync_puts_and_reads_run_on_the_calling_thread_without_an_event_loop(
    saver: ZincirSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    if saver.store.backend != "sqlite":
        pytest.skip("PostgreSQL's sync saver drives the async store (the bridge)")
    threads: list[int] = []
    for name in ("_write_tx_here", "_write_alone_here"):  # a transaction, or one statement
        original = getattr(type(saver.store), name)

        def recorded(store: Any, *args: Any, _original: Any = original, **options: Any) -> Any:
            threads.append(threading.get_ident())
            return _original(store, *args, **options)

        monkeypatch.setattr(type(saver.store), name, recorded)
    stored = saver.put(cfg("here"), checkpoint(x=1), meta(), {})
    saver.put_writes(stored, [("ch", 1)], "task")
    found = saver.get_tuple(stored)
    assert found is not None and found.pending_writes == [("task", "ch", 1)]
    assert threads == [threading.get_ident()] * 2
    assert saver._blocking._helper is None and not saver._blocking._holders  # no loop, no helper
    out = (
        counter_graph(3)
        .compile(checkpointer=saver)
        .invoke({"n": 0, "trail": []}, {"configurable": {"thread_id": "graph"}})
    )
    assert out["n"] == 3 and not saver._blocking._holders


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files on Linux")
def test_short_lived_threads_leave_no_connection_or_loop_open(saver: ZincirSaver) -> None:
    stored = saver.put(cfg("short"), checkpoint(x=1), meta(), {})

    def visit() -> None:
        saver.put_writes(stored, [("ch", threading.get_ident())], f"task-{threading.get_ident()}")
        assert saver.get_tuple(stored) is not None
        assert len(list(saver.list(cfg("short")))) == 1

    def open_files() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    visit()  # the helper threads are up
    before = open_files()
    for _ in range(60):
        worker = threading.Thread(target=visit)
        worker.start()
        worker.join()
    assert open_files() - before < 10


async def test_sync_methods_also_work_inside_a_running_event_loop(saver: ZincirSaver) -> None:
    """A notebook runs a loop on its main thread: sync calls still complete."""
    made = checkpoint(x=1)
    stored = saver.put(cfg("in-loop"), made, meta(), {})
    found = saver.get_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"] == {"x": 1}
    assert await saver.aget_tuple(stored) is not None


async def test_async_saver_runs_a_graph_and_its_sync_methods_work_from_a_thread(db: str) -> None:
    async with AsyncZincirSaver.from_conn_string(db) as saver:
        graph = counter_graph(3).compile(checkpointer=saver)
        out = await graph.ainvoke({"n": 0, "trail": []}, {"configurable": {"thread_id": "a"}})
        assert out["n"] == 3
        found = await asyncio.to_thread(saver.get_tuple, cfg("a"))
        assert found is not None and found.checkpoint["channel_values"]["n"] == 3


# -- JSON first, never pickle -----------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Parcel:
    weight: float
    sent: datetime


class Opaque:
    """Neither JSON nor msgpack can hold it: only pickle could."""


async def test_plain_values_are_stored_as_json_and_the_rest_as_msgpack(
    saver: ZincirSaver,
) -> None:
    plain = checkpoint(note="héllo", items=[1, 2.5, None, True], nested={"a": {"b": []}})
    saver.put(cfg("json"), plain, meta(), {})
    row = await saver.store.get_graph_checkpoint("json", "")
    assert row is not None and row.type == "json" and b'"h\xc3\xa9llo"' in row.checkpoint

    rich = {
        "messages": [HumanMessage("hi", id="1"), AIMessage("hello", id="2")],
        "parcel": Parcel(1.5, datetime(2030, 1, 1, tzinfo=UTC)),
        "colour": Colour.RED,
        "by_number": {1: "one"},
        "pair": (1, 2),
    }
    saver.put(cfg("rich"), checkpoint(**rich), meta(), {})
    row = await saver.store.get_graph_checkpoint("rich", "")
    assert row is not None and row.type == "msgpack"
    found = saver.get_tuple(cfg("rich"))
    assert found is not None
    values = found.checkpoint["channel_values"]
    assert values["messages"] == rich["messages"] and values["parcel"] == rich["parcel"]
    assert values["colour"] is Colour.RED and values["by_number"] == {1: "one"}
    assert values["pair"] == [1, 2]  # as LangGraph's own serializer reads a tuple


def test_a_value_only_pickle_could_hold_is_refused_and_nothing_is_stored(
    saver: ZincirSaver,
) -> None:
    with pytest.raises(
        zincir.NotJsonSerializable, match=r"channel 'bad'.*a value of type Opaque.*never pickles"
    ):
        saver.put(cfg("p"), checkpoint(ok=1, bad=Opaque()), meta(), {})
    assert saver.get_tuple(cfg("p")) is None

    stored = saver.put(cfg("p"), checkpoint(ok=1), meta(), {})
    with pytest.raises(zincir.NotJsonSerializable, match="write to 'ch'"):
        saver.put_writes(stored, [("fine", 1), ("ch", Opaque())], "task-1")
    found = saver.get_tuple(stored)
    assert found is not None and found.pending_writes == []


def test_a_graph_whose_state_needs_pickle_fails_with_a_clear_error(saver: ZincirSaver) -> None:
    class State(TypedDict):
        thing: Any

    builder = StateGraph(State)
    builder.add_node("make", lambda s: {"thing": Opaque()})
    builder.add_edge(START, "make")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(zincir.NotJsonSerializable, match="never pickles"):
        graph.invoke({"thing": 1}, {"configurable": {"thread_id": "g"}})


def test_no_serializer_may_bring_pickle_in(db: str) -> None:
    with pytest.raises(zincir.InvalidInput, match="never pickles"):
        ZincirSerializer(pickle_fallback=True)
    with pytest.raises(zincir.RecordFormatError, match="never unpickles"):
        ZincirSerializer().loads_typed(("pickle", pickle.dumps(1)))
    with ZincirSaver.from_conn_string(db, serde=JsonPlusSerializer(pickle_fallback=True)) as saver:
        with pytest.raises(zincir.NotJsonSerializable, match="produced a pickle"):
            saver.put(cfg("x"), checkpoint(bad=Opaque()), meta(), {})
        assert saver.get_tuple(cfg("x")) is None


class TaggingSerializer:
    """A serializer of the user's own (not a ZincirSerializer): JSON under its own tag."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "tagged", json.dumps(obj).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        assert data[0] == "tagged"
        return json.loads(data[1])


async def test_a_serializer_set_on_an_open_saver_serializes_every_value(
    saver: ZincirSaver,
) -> None:
    """The default's plain-JSON shortcut applies to the default only, and is decided at each
    call: a serializer assigned later (an encrypting one, say) sees every value."""
    saver.serde = TaggingSerializer()
    stored = saver.put(cfg("tag"), checkpoint(x=1), meta(), {})
    saver.put_writes(stored, [("ch", {"y": 2})], "task")
    row = await saver.store.get_graph_checkpoint("tag", "")
    assert row is not None and row.type == "tagged"
    assert [write.type for write in row.writes] == ["tagged"]
    found = saver.get_tuple(stored)
    assert found is not None and found.pending_writes == [("task", "ch", {"y": 2})]


def test_the_serializer_reads_back_exactly_what_it_wrote() -> None:
    serde = ZincirSerializer()
    for value in [None, b"raw", "lone \ud800 surrogate", {"k": [1, 2.0, "x"]}, float("nan")]:
        type_tag, data = serde.dumps_typed(value)
        back = serde.loads_typed((type_tag, data))
        assert back == value or (value != value and back != back)
    assert serde.dumps_typed({"k": 1})[0] == "json"
    assert serde.dumps_typed({"k": Colour.RED})[0] == "msgpack"


# -- fencing ----------------------------------------------------------------------------


def test_a_writer_whose_lease_was_taken_over_stores_nothing(db: str) -> None:
    with (
        ZincirSaver.from_conn_string(db) as first,
        ZincirSaver.from_conn_string(db) as second,
    ):
        with first.fenced("t", ttl=5) as old:
            kept = first.put(cfg("t"), checkpoint(v="old"), meta(0), {})
            with second.fenced("t", force=True) as new:
                assert new.token == old.token + 1
                with pytest.raises(zincir.FencedOut, match="superseded"):
                    first.put(
                        cfg("t", kept["configurable"]["checkpoint_id"]), checkpoint(), meta(1), {}
                    )
                with pytest.raises(zincir.FencedOut):
                    first.put_writes(kept, [("ch", 1)], "task")
                with pytest.raises(zincir.FencedOut):
                    first.delete_thread("t")
                latest = second.get_tuple(cfg("t"))
                assert latest is not None and ids_of([latest]) == [
                    kept["configurable"]["checkpoint_id"]
                ]
                assert latest.pending_writes == []
                second.put(kept, checkpoint(v="new"), meta(1), {})
        assert len(list(first.list(cfg("t")))) == 2


def test_writes_without_a_live_lease_are_refused_and_the_lease_is_renewed(db: str) -> None:
    with (
        ZincirSaver.from_conn_string(db) as holder,
        ZincirSaver.from_conn_string(db) as other,
    ):
        with holder.fenced("t", ttl=timedelta(milliseconds=90)):
            time.sleep(0.3)  # three ttls: only the renewal keeps it
            with pytest.raises(zincir.LeaseHeld, match="leased by"):
                other.put(cfg("t"), checkpoint(), meta(), {})
            with pytest.raises(zincir.LeaseHeld):
                with other.fenced("t"):
                    pass  # pragma: no cover
            with pytest.raises(zincir.LeaseHeld):
                other.prune(["t"], strategy="delete")
            other.put(cfg("elsewhere"), checkpoint(), meta(), {})  # other threads are free
            stored = holder.put(cfg("t"), checkpoint(), meta(), {})
            with pytest.raises(zincir.LeaseHeld, match="leased by"):
                other.put_writes(stored, [("a", 1), ("b", 2)], "task")
            with pytest.raises(zincir.LeaseHeld, match="leased by"):
                other.put_writes(stored, [("__error__", "boom")], "task")
            assert holder.get_tuple(stored).pending_writes == []  # type: ignore[union-attr]
        other.put(cfg("t"), checkpoint(), meta(), {})  # released: anyone may write
        other.put_writes(stored, [("a", 1)], "task")
        other.put_writes(stored, [("a", 2)], "task")  # kept: the first stays, no error
        assert other.get_tuple(stored).pending_writes == [("task", "a", 1)]  # type: ignore[union-attr]
        assert len(list(other.list(cfg("t")))) == 2


async def test_unleased_puts_judge_leases_and_stamp_rows_by_the_store_s_clock(db: str) -> None:
    """The blocking path binds the store's time into its statements: a lease expired by the
    store's clock (not the machine's) no longer holds the thread, one live by it does, and
    rows carry that time. The store's clock runs years behind the machine's here."""
    clock = FakeClock(datetime(2020, 1, 1, tzinfo=UTC))
    store = zincir.open_store(db, clock=clock)
    holder, other = ZincirSaver(store), ZincirSaver(store)
    try:
        with holder.fenced("t", ttl=60):
            with pytest.raises(zincir.LeaseHeld, match="leased by"):
                other.put(cfg("t"), checkpoint(), meta(), {})
            clock.advance(61)  # expired by the store's clock
            stored = other.put(cfg("t"), checkpoint(), meta(), {})
            other.put_writes(stored, [("a", 1), ("b", 2)], "task")
        found = other.get_tuple(stored)
        assert found is not None and found.pending_writes == [("task", "a", 1), ("task", "b", 2)]
        if not db.startswith("postgresql://"):
            with sqlite3.connect(db) as conn:
                stamps = conn.execute(
                    "SELECT created_at FROM langgraph_checkpoints UNION ALL "
                    "SELECT created_at FROM langgraph_writes"
                ).fetchall()
            assert stamps == [("2020-01-01T00:01:01.000000Z",)] * 3
    finally:
        holder.close()
        other.close()
        await store.close()


def test_a_tasks_writes_partly_stored_keep_the_stored_and_add_the_rest(db: str) -> None:
    with ZincirSaver.from_conn_string(db) as saver:
        stored = saver.put(cfg("t"), checkpoint(), meta(), {})
        saver.put_writes(stored, [("a", 1)], "task")
        saver.put_writes(stored, [("a", 2), ("b", 3)], "task")  # (task, 0) kept, (task, 1) new
        saver.put_writes(stored, [("a", 4), ("b", 5)], "task")  # both kept: nothing changes
        saver.put_writes(stored, [("c", 6)] * 20, "other")  # more than one statement's worth
        found = saver.get_tuple(stored)
        assert found is not None
        assert found.pending_writes == [("other", "c", 6)] * 20 + [
            ("task", "a", 1),
            ("task", "b", 3),
        ]


async def test_an_expired_lease_is_taken_without_force_and_its_holder_is_fenced(
    db: str,
) -> None:
    async with AsyncZincirSaver.from_conn_string(db) as saver:
        store = saver.store
        stale = await store.acquire_thread_lease("t", owner="a", ttl=timedelta(milliseconds=30))
        await asyncio.sleep(0.06)
        async with saver.fenced("t") as fresh:
            assert fresh.token == stale.token + 1
            await saver.aput(cfg("t"), checkpoint(), meta(), {})
        with pytest.raises(zincir.FencedOut, match="superseded"):
            await store.put_graph_checkpoint(
                NewGraphCheckpoint("t", "", "x", None, "json", b"1", "{}"),
                lease=stale,
            )
        assert len([t async for t in saver.alist(cfg("t"))]) == 1
        assert not await store.renew_thread_lease(stale)


def test_a_graph_fenced_out_mid_run_stops_and_stores_nothing_after(db: str) -> None:
    with (
        ZincirSaver.from_conn_string(db) as mine,
        ZincirSaver.from_conn_string(db) as theirs,
    ):
        takeover = theirs.fenced("g", force=True)  # a recovery in another process

        def bump(state: Counter) -> Counter:
            if state["n"] == 2:
                takeover.__enter__()
            return {"n": state["n"] + 1, "trail": state["trail"]}

        builder = StateGraph(Counter)
        builder.add_node("bump", bump)
        builder.add_edge(START, "bump")
        builder.add_conditional_edges("bump", lambda s: "bump" if s["n"] < 5 else END)
        graph = builder.compile(checkpointer=mine)
        try:
            with mine.fenced("g"):
                with pytest.raises(zincir.FencedOut):
                    graph.invoke(
                        {"n": 0, "trail": []},
                        {"configurable": {"thread_id": "g"}},
                        durability="sync",
                    )
        finally:
            takeover.__exit__(None, None, None)
        history = list(theirs.list(cfg("g")))
        assert [t.metadata["step"] for t in history] == [2, 1, 0, -1]
        assert history[0].pending_writes == []  # the fenced task's writes were refused


# -- list: filters, before, limit, pages ------------------------------------------------


def test_list_filters_by_metadata_with_json_types(saver: ZincirSaver) -> None:
    saver.put(
        cfg("f"), checkpoint(), meta(1, flag=True, score=1, tag="a", info={"x": 1, "y": [2]}), {}
    )
    saver.put(cfg("f"), checkpoint(), meta(2, flag=False, score=1.0, tag="1"), {})
    saver.put(cfg("f"), checkpoint(), meta(3, score=None), {})

    def steps(**where: Any) -> list[int]:
        return [t.metadata["step"] for t in saver.list(cfg("f"), filter=where)]

    assert steps(flag=True) == [1] and steps(flag=False) == [2]
    assert steps(score=1) == [2, 1]  # 1 matches 1.0, not true
    assert steps(tag="a") == [1] and steps(tag=1) == []
    assert steps(info={"y": [2], "x": 1}) == [1]  # any key order
    assert steps(score=None) == [3] and steps(missing=None) == [3, 2, 1]
    assert steps(source="loop", step=2) == [2]
    assert steps(**{"odd key\"'.$": 1}) == []
    with pytest.raises(zincir.NotJsonSerializable):
        steps(step=Opaque())


def test_list_before_limit_namespaces_and_pages(saver: ZincirSaver) -> None:
    ids = chain(saver, "big", 230)
    chain(saver, "big", 2, ns="child:1")
    chain(saver, "other", 3)
    assert ids_of(saver.list(cfg("big"))) == ids[::-1]
    assert len(list(saver.list(cfg("big", ns=None)))) == 232  # no namespace: all of them
    assert ids_of(saver.list(cfg("big"), limit=150)) == ids[::-1][:150]
    assert ids_of(saver.list(cfg("big"), before=cfg("big", ids[120]), limit=3)) == ids[119:116:-1]
    assert ids_of(saver.list(cfg("big", ids[7]))) == [ids[7]]
    assert list(saver.list(cfg("big"), limit=0)) == []
    assert len(list(saver.list(None))) == 235
    assert len(list(saver.list(None, filter={"step": 1}))) == 3


async def test_async_list_pages_the_same_way(db: str) -> None:
    async with AsyncZincirSaver.from_conn_string(db, synchronous=fast(db)) as saver:
        ids = await asyncio.to_thread(chain, saver, "t", 120)
        found = [t async for t in saver.alist(cfg("t"), before=cfg("t", ids[-1]), limit=110)]
        assert ids_of(found) == ids[-2::-1][:110]


# -- copy, prune, delete_for_runs -------------------------------------------------------


def test_copy_thread_refuses_a_target_with_checkpoints_and_copies_into_a_new_one(
    saver: ZincirSaver,
) -> None:
    ids = chain(saver, "src", 3)
    saver.put_writes(cfg("src", ids[-1]), [("ch", {"v": 1})], "task")
    chain(saver, "busy", 1)
    with pytest.raises(zincir.InvalidInput, match="already has checkpoints"):
        saver.copy_thread("src", "busy")
    assert len(list(saver.list(cfg("busy")))) == 1
    with pytest.raises(zincir.InvalidInput, match="onto itself"):
        saver.copy_thread("src", "src")
    saver.copy_thread("src", "dst")
    copied = saver.get_tuple(cfg("dst"))
    assert copied is not None and copied.pending_writes == [("task", "ch", {"v": 1})]
    assert copied.parent_config is not None
    assert copied.parent_config["configurable"] == {
        "thread_id": "dst",
        "checkpoint_ns": "",
        "checkpoint_id": ids[1],
    }
    saver.delete_thread("src")
    assert ids_of(saver.list(cfg("dst"))) == ids[::-1]


def test_prune_keeps_the_chain_a_delta_channel_replays_from(saver: ZincirSaver) -> None:
    plain = chain(saver, "plain", 4)
    delta = chain(saver, "delta", 5)
    last = checkpoint()
    counters = {"messages": [2, 2], "other": [1, 1]}  # two super-steps since the snapshot
    saver.put(cfg("delta", delta[-1]), last, meta(5, counters_since_delta_snapshot=counters), {})
    saver.put_writes(cfg("delta", delta[-1]), [("messages", "m")], "task")
    saver.prune(["plain", "delta"])
    assert ids_of(saver.list(cfg("plain"))) == [plain[-1]]
    assert ids_of(saver.list(cfg("delta"))) == [last["id"], delta[-1], delta[-2]]
    kept = saver.get_tuple(cfg("delta", delta[-1]))
    assert kept is not None and kept.pending_writes == [("task", "messages", "m")]
    with pytest.raises(zincir.InvalidInput, match="strategy"):
        saver.prune(["plain"], strategy="newest")


def test_delete_for_runs_removes_those_runs_checkpoints_and_their_writes(
    saver: ZincirSaver,
) -> None:
    first = chain(saver, "r", 2, run_id="run-1")
    saver.put_writes(cfg("r", first[-1]), [("ch", 1)], "task")
    second = checkpoint()
    saver.put(cfg("r", first[-1]), second, meta(2, run_id="run-2"), {})
    chain(saver, "elsewhere", 1, run_id="run-1")
    saver.delete_for_runs(["run-1", "never-ran"])
    assert ids_of(saver.list(cfg("r"))) == [second["id"]]
    assert list(saver.list(cfg("elsewhere"))) == []
    assert saver.get_tuple(cfg("r", first[-1])) is None


# -- ordering ---------------------------------------------------------------------------


class GatedSerializer(ZincirSerializer):
    """Serializes the value ``"slow"`` only once ``gate`` opens (and fails it on ``"fail"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        values = obj.get("channel_values", {}) if isinstance(obj, dict) else {}
        if obj in ("slow", "fail") or values.get("v") == "slow":
            self.entered.set()
            assert self.gate.wait(10)
            if obj == "fail":
                raise ValueError("the task's value broke")
        return super().dumps_typed(obj)


@pytest.mark.parametrize("value", ["slow", "fail"])
def test_a_checkpoint_waits_for_the_writes_of_its_parent_s_tasks(db: str, value: str) -> None:
    serde = GatedSerializer()
    with ZincirSaver.from_conn_string(db, serde=serde) as saver:
        parent = saver.put(cfg("o"), checkpoint(), meta(0), {})
        child = checkpoint()
        writing = threading.Thread(
            target=_quietly, args=(saver.put_writes, parent, [("ch", value)], "task")
        )
        writing.start()
        assert serde.entered.wait(10)
        outcome: list[BaseException | None] = []
        putting = threading.Thread(
            target=lambda: outcome.append(_quietly(saver.put, parent, child, meta(1), {}))
        )
        putting.start()
        time.sleep(0.2)
        assert saver.get_tuple(cfg("o", child["id"])) is None  # still waiting for the writes
        serde.gate.set()
        writing.join()
        putting.join()
        stored = saver.get_tuple(cfg("o", child["id"]))
        if value == "slow":
            assert outcome == [None] and stored is not None
            assert [w[1:] for w in saver.get_tuple(parent).pending_writes or []] == [("ch", "slow")]  # type: ignore[union-attr]
        else:
            assert isinstance(outcome[0], zincir.NotJsonSerializable) and stored is None


def test_writes_wait_for_their_own_checkpoint(db: str) -> None:
    serde = GatedSerializer()
    with ZincirSaver.from_conn_string(db, serde=serde) as saver:
        slow = checkpoint(v="slow")
        putting = threading.Thread(target=saver.put, args=(cfg("w"), slow, meta(), {}))
        putting.start()
        assert serde.entered.wait(10)
        done = threading.Event()

        def write() -> None:
            saver.put_writes(cfg("w", slow["id"]), [("ch", 1)], "task")
            done.set()

        writing = threading.Thread(target=write)
        writing.start()
        assert not done.wait(0.2)  # the checkpoint is not stored yet, so neither are they
        serde.gate.set()
        putting.join()
        writing.join()
        found = saver.get_tuple(cfg("w"))
        assert found is not None and found.pending_writes == [("task", "ch", 1)]


def _quietly(call: Any, *args: Any) -> BaseException | None:
    try:
        call(*args)
    except BaseException as error:
        return error
    return None


def test_special_channel_writes_replace_and_regular_ones_are_kept(saver: ZincirSaver) -> None:
    stored = saver.put(cfg("s"), checkpoint(), meta(), {})
    saver.put_writes(stored, [("ch", "first"), ("__interrupt__", "ask")], "task", "p")
    saver.put_writes(stored, [("ch", "second"), ("__interrupt__", "ask again")], "task", "p")
    saver.put_writes(stored, [("ch", "other task")], "another", "a")
    found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("another", "ch", "other task"),  # task path "a" sorts first
        ("task", "__interrupt__", "ask again"),
        ("task", "ch", "first"),
    ]


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.get_tuple({"thread_id": "t"}), "configurable"),
        (lambda s: s.get_tuple({"configurable": {}}), "thread_id"),
        (lambda s: s.get_tuple(cfg("")), "must not be empty"),
        (lambda s: s.get_tuple(cfg("a\nb")), "control character"),
        (lambda s: s.get_tuple(cfg(1.5)), "must be a str"),
        (lambda s: s.put(cfg("t"), {"v": 1}, meta(), {}), "checkpoint is a dict with an id"),
        (lambda s: s.put(cfg("t"), checkpoint(), {"x": Opaque()}, {}), "metadata must be JSON"),
        (lambda s: s.put_writes(cfg("t"), [("ch", 1)], "task"), "checkpoint_id"),
        (lambda s: s.put_writes(cfg("t", "c"), [("ch", 1)], ""), "task_id"),
        (lambda s: s.put_writes(cfg("t", "c"), ["ch"], "task"), "pair"),
        (lambda s: s.put_writes(cfg("t", "c"), "ch", "task"), "list of"),
        (lambda s: list(s.list(cfg("t"), limit=-1)), "limit"),
        (lambda s: list(s.list(cfg("t"), before=cfg("t"))), "before"),
        (lambda s: list(s.list(cfg("t"), filter=["step"])), "filter"),
        (lambda s: s.delete_for_runs("run-1"), "list of ids"),
        (lambda s: s.prune("t"), "list of ids"),
        (lambda s: s.copy_thread("t", ""), "target thread id"),
        (lambda s: s.fenced("t", ttl=0.001).__enter__(), "30 ms"),
    ],
)
def test_bad_input_is_refused_before_anything_is_stored(
    saver: ZincirSaver, call: Any, message: str
) -> None:
    with pytest.raises(zincir.InvalidInput, match=message):
        call(saver)
    assert list(saver.list(None)) == []


def test_int_and_uuid_thread_ids_are_stored_as_text(saver: ZincirSaver) -> None:
    thread = uuid4()
    stored = saver.put(cfg(thread), checkpoint(), meta(), {})  # type: ignore[arg-type]
    assert stored["configurable"]["thread_id"] == thread
    assert saver.get_tuple(cfg(str(thread))) is not None
    saver.put(cfg(7), checkpoint(), meta(), {})  # type: ignore[arg-type]
    assert saver.get_tuple(cfg("7")) is not None


def test_an_in_memory_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(zincir.InvalidInput, match="database file"):
        with ZincirSaver.from_conn_string(":memory:"):
            pass  # pragma: no cover
    other = tmp_path / "other.db"
    other.write_bytes(b"not a database at all, just text" * 100)
    with pytest.raises(zincir.NotAZincirDatabase):
        with ZincirSaver.from_conn_string(other):
            pass  # pragma: no cover


def test_a_closed_saver_refuses_calls(db: str) -> None:
    with ZincirSaver.from_conn_string(db) as saver:
        pass
    with pytest.raises(zincir.StoreError, match="closed"):
        saver.get_tuple(cfg("t"))


async def test_a_saver_on_an_open_store_shares_it_and_leaves_it_open(db: str) -> None:
    store = zincir.open_store(db)
    try:
        saver = AsyncZincirSaver(store)
        await saver.aput(cfg("t"), checkpoint(x=1), meta(), {})
        await saver.aclose()
        lease = await store.create_run("run-1", name="beside", owner="me", ttl=timedelta(seconds=5))
        assert lease.run_id == "run-1"
        row = await store.get_graph_checkpoint("t", "")
        assert row is not None and row.type == "json"
    finally:
        await store.close()
