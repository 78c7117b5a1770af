"""One conformance suite for every restart store: the file store and the SQL store must keep
the same contract (forward-only revisions, one winner per revision across processes, bad
input refused before anything changes)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.conftest import BACKENDS, REPO
from zincir import (
    InvalidInput,
    NotJsonSerializable,
    PayloadTooLarge,
    RevisionConflict,
)
from zincir.restart import (
    FileRestartStore,
    RestartCheckpoint,
    RestartStore,
    SQLRestartStore,
)
from zincir.store import Store

WORKER = REPO / "tests" / "restart" / "restart_worker.py"
RUN = "run-1"
MiB = 1024 * 1024


@dataclass
class Subject:
    """A restart store under test, where it keeps its checkpoints, and how to open another."""

    kind: str
    location: Path | str  # a folder, a SQLite file, or a PostgreSQL URL
    store: Any  # FileRestartStore | SQLRestartStore: both also offer list()
    make: Callable[..., Awaitable[Any]]

    async def snapshot(self, run_id: str = RUN) -> list[RestartCheckpoint]:
        """Everything the run has stored (and, for files, the folder's names too)."""
        listed: list[RestartCheckpoint] = await self.store.list(run_id)
        return listed


SQL_KINDS = ["sql"] + (["postgres"] if "postgres" in BACKENDS else [])
"""The SQL store on each backend under test (``postgres`` with ZINCIR_TEST_BACKENDS)."""


@pytest.fixture(params=["file", *SQL_KINDS])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    opened: list[Store] = []
    location: Path | str = tmp_path / ("checkpoints" if request.param == "file" else "zincir.db")
    if request.param == "postgres":
        location = str(request.getfixturevalue("postgres_url"))

    async def make(**options: Any) -> Any:
        if request.param == "file":
            return FileRestartStore(location, **options)
        if not opened:
            opened.append(zincir.open_store(location))
        return SQLRestartStore(opened[0], **options)

    yield Subject(request.param, location, await make(), make)
    for store in opened:
        await store.close()


async def test_both_stores_satisfy_the_protocol(subject: Subject) -> None:
    assert isinstance(subject.store, RestartStore)


async def test_a_missing_checkpoint_loads_as_none_and_removes_as_false(subject: Subject) -> None:
    assert await subject.store.load(RUN, "absent") is None
    assert await subject.store.remove(RUN, "absent") is False
    assert await subject.snapshot() == []


@pytest.mark.parametrize(
    "payload",
    [
        {"offset": 17, "cursor": "évènement-42", "seen": [1, 2.5, None, True]},
        [1, "two", {"three": 3}],
        "just text",
        0,
        -1.5,
        None,
        False,
        {},
    ],
)
async def test_a_saved_checkpoint_loads_back_as_saved(subject: Subject, payload: Any) -> None:
    saved = await subject.store.save(RUN, "consumer", 3, payload)
    assert saved == RestartCheckpoint(RUN, "consumer", 3, payload)
    assert await subject.store.load(RUN, "consumer") == saved
    reopened = await subject.make()
    assert await reopened.load(RUN, "consumer") == saved


async def test_revisions_move_forward_and_may_skip(subject: Subject) -> None:
    store = subject.store
    for revision in (0, 1, 5, 6, 2**63 - 1):
        await store.save(RUN, "consumer", revision, {"at": revision})
        assert await store.load(RUN, "consumer") == RestartCheckpoint(
            RUN, "consumer", revision, {"at": revision}
        )


async def test_an_identical_rewrite_is_a_no_op(subject: Subject) -> None:
    store = subject.store
    first = await store.save(RUN, "consumer", 4, {"a": 1, "b": [1, 2]})
    again = await store.save(RUN, "consumer", 4, {"a": 1, "b": [1, 2]})
    reordered = await store.save(RUN, "consumer", 4, {"b": [1, 2], "a": 1})
    assert first == again == reordered
    assert list((await store.load(RUN, "consumer")).payload) == ["a", "b"]  # as first stored


async def test_a_stale_revision_conflicts_and_changes_nothing(subject: Subject) -> None:
    store = subject.store
    await store.save(RUN, "consumer", 7, {"offset": 700})
    with pytest.raises(RevisionConflict) as caught:
        await store.save(RUN, "consumer", 6, {"offset": 600})
    error = caught.value
    assert error.run_id == RUN
    assert RUN in str(error) and "7" in str(error) and "6" in str(error)
    assert "consumer" in str(error)
    assert await store.load(RUN, "consumer") == RestartCheckpoint(
        RUN, "consumer", 7, {"offset": 700}
    )


@pytest.mark.parametrize(
    ("stored", "offered"),
    [
        ({"offset": 1}, {"offset": 2}),
        ({"offset": 1}, {"offset": 1.0}),
        ({"offset": 1}, {"offset": True}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": None}),
        ("x", None),
    ],
)
async def test_another_payload_at_the_stored_revision_conflicts(
    subject: Subject, stored: Any, offered: Any
) -> None:
    store = subject.store
    await store.save(RUN, "consumer", 2, stored)
    with pytest.raises(RevisionConflict) as caught:
        await store.save(RUN, "consumer", 2, offered)
    assert caught.value.run_id == RUN
    assert "revision 2" in str(caught.value)
    loaded = await store.load(RUN, "consumer")
    assert loaded is not None
    assert (loaded.revision, loaded.payload) == (2, stored)
    assert type(loaded.payload) is type(stored)


async def test_remove_deletes_and_a_later_save_starts_afresh(subject: Subject) -> None:
    store = subject.store
    await store.save(RUN, "consumer", 9, "nine")
    await store.save(RUN, "other", 1, "one")
    assert await store.remove(RUN, "consumer") is True
    assert await store.remove(RUN, "consumer") is False
    assert await store.load(RUN, "consumer") is None
    assert await subject.snapshot() == [RestartCheckpoint(RUN, "other", 1, "one")]
    assert await store.save(RUN, "consumer", 0, "zero") == RestartCheckpoint(
        RUN, "consumer", 0, "zero"
    )


NASTY_IDS = [
    "/",
    "..",
    ".",
    "../../etc/passwd",
    "a/b",
    "a%2Fb",
    "A",
    "a",
    ".lock",
    "x.ckpt.tmp",
    "=",
    "%",
    "ünïcödé-名前-🙂",
    "e\u0301",  # decomposed é
    "\u00e9",  # composed é
    " spaced ",
    "\\",
    "x" * 256,
    "é" * 128,
]


async def test_any_ids_are_kept_apart_and_stay_inside_the_store(
    subject: Subject, tmp_path: Path
) -> None:
    store = subject.store
    runs = [RUN, "run/../..", "🙂", "R" * 256]
    before = set(os.listdir(tmp_path))
    for run_id in runs:
        for index, checkpoint_id in enumerate(NASTY_IDS):
            await store.save(run_id, checkpoint_id, index, {"run": run_id, "id": checkpoint_id})
    for run_id in runs:
        for index, checkpoint_id in enumerate(NASTY_IDS):
            assert await store.load(run_id, checkpoint_id) == RestartCheckpoint(
                run_id, checkpoint_id, index, {"run": run_id, "id": checkpoint_id}
            )
        listed = await subject.snapshot(run_id)
        assert [c.checkpoint_id for c in listed] == sorted(NASTY_IDS)
    assert set(os.listdir(tmp_path)) - before <= {"zincir.db-wal", "zincir.db-shm"}
    if subject.kind == "file":
        names = os.listdir(subject.location)
        assert len(names) == len(runs) * len(NASTY_IDS) + 1  # and the lock file
        assert all(name.isascii() and len(name) <= 200 for name in names)
        assert all(os.path.isfile(subject.location / name) for name in names)
    assert await store.remove("run/../..", "..") is True
    assert await store.load("run/../..", "..") is None
    assert await store.load("run/../..", ".") is not None


async def test_list_holds_one_run_ordered_by_checkpoint_id(subject: Subject) -> None:
    store = subject.store
    for checkpoint_id in ("b", "a", "c/1", "B"):
        await store.save("run", checkpoint_id, 1, checkpoint_id)
    await store.save("run.x", "a", 1, "other run")
    await store.save("ru", "n.a", 1, "other run")
    assert [c.checkpoint_id for c in await subject.snapshot("run")] == ["B", "a", "b", "c/1"]
    assert [c.payload for c in await subject.snapshot("run.x")] == ["other run"]
    assert await subject.snapshot("nobody") == []


def _oversized() -> str:
    return "x" * MiB  # with its quotes, two bytes over the default bound


BAD_SAVES: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("negative revision", {"revision": -1}, InvalidInput),
    ("bool revision", {"revision": True}, InvalidInput),
    ("str revision", {"revision": "3"}, InvalidInput),
    ("float revision", {"revision": 3.0}, InvalidInput),
    ("revision past int64", {"revision": 2**63}, InvalidInput),
    ("None revision", {"revision": None}, InvalidInput),
    ("object payload", {"payload": object()}, NotJsonSerializable),
    ("int-keyed payload", {"payload": {1: "a"}}, NotJsonSerializable),
    ("NaN payload", {"payload": {"x": float("nan")}}, NotJsonSerializable),
    ("lone surrogate", {"payload": "\ud800"}, NotJsonSerializable),
    ("payload holding an object", {"payload": [object()]}, NotJsonSerializable),
    ("oversized payload", {"payload": _oversized()}, PayloadTooLarge),
    ("empty run id", {"run_id": ""}, InvalidInput),
    ("empty checkpoint id", {"checkpoint_id": ""}, InvalidInput),
    ("run id with NUL", {"run_id": "a\x00b"}, InvalidInput),
    ("checkpoint id with newline", {"checkpoint_id": "a\nb"}, InvalidInput),
    ("run id not text", {"run_id": 7}, InvalidInput),
    ("checkpoint id not text", {"checkpoint_id": None}, InvalidInput),
    ("run id too long", {"run_id": "r" * 257}, InvalidInput),
]


@pytest.mark.parametrize(
    ("case", "change", "error"), BAD_SAVES, ids=[case for case, _, _ in BAD_SAVES]
)
async def test_bad_input_raises_a_typed_error_and_changes_nothing(
    subject: Subject, case: str, change: dict[str, Any], error: type[Exception]
) -> None:
    store = subject.store
    stored = await store.save(RUN, "consumer", 1, {"offset": 1})
    arguments = {"run_id": RUN, "checkpoint_id": "consumer", "revision": 2, "payload": 0}
    arguments.update(change)
    files = sorted(os.listdir(subject.location)) if subject.kind == "file" else None
    with pytest.raises(error) as caught:
        await store.save(**arguments)
    if arguments["run_id"] == RUN:
        assert caught.value.run_id == RUN  # type: ignore[attr-defined]
        assert f"[run {RUN}]" in str(caught.value)
    assert await store.load(RUN, "consumer") == stored
    assert await subject.snapshot() == [stored]
    if files is not None:
        assert sorted(os.listdir(subject.location)) == files


@pytest.mark.parametrize("method", ["load", "remove"])
async def test_bad_ids_are_refused_by_load_and_remove(subject: Subject, method: str) -> None:
    call = getattr(subject.store, method)
    for run_id, checkpoint_id in [("", "c"), (RUN, ""), (RUN, None), ("a\x00", "c")]:
        with pytest.raises(InvalidInput):
            await call(run_id, checkpoint_id)


async def test_the_payload_bound_is_configurable(subject: Subject) -> None:
    small = await subject.make(max_payload_bytes=100)
    fits = "x" * 98  # 100 bytes with its quotes
    assert (await small.save(RUN, "small", 1, fits)).payload == fits
    with pytest.raises(PayloadTooLarge) as caught:
        await small.save(RUN, "small", 2, fits + "x")
    assert caught.value.run_id == RUN and "100" in str(caught.value)
    wide = "é" * 49  # 98 bytes in UTF-8: the bound counts bytes, not characters
    with pytest.raises(PayloadTooLarge):
        await small.save(RUN, "small", 2, wide + "é")
    assert (await small.load(RUN, "small")).revision == 1
    for bound in (0, -1, 16 * MiB + 1, True, "1"):
        with pytest.raises(InvalidInput):
            await subject.make(max_payload_bytes=bound)


async def test_a_payload_at_the_default_bound_is_stored(subject: Subject) -> None:
    payload = "x" * (MiB - 2)
    assert (await subject.store.save(RUN, "big", 1, payload)).payload == payload
    assert (await subject.store.load(RUN, "big")).payload == payload


async def test_concurrent_saves_in_one_process_have_one_winner(subject: Subject) -> None:
    store = subject.store

    async def attempt(worker: int) -> bool:
        try:
            await store.save(RUN, "consumer", 1, {"worker": worker})
        except RevisionConflict:
            return False
        return True

    outcomes = await asyncio.gather(*(attempt(worker) for worker in range(16)))
    assert outcomes.count(True) == 1
    loaded = await store.load(RUN, "consumer")
    assert loaded is not None and loaded.payload == {"worker": outcomes.index(True)}


def _race(kind: str, location: Path | str, workers: int, revisions: int) -> list[list[str]]:
    """Start ``workers`` processes, let them save together, and return each one's lines."""
    kind = "sql" if kind == "postgres" else kind  # the worker opens any store URL as "sql"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "race", kind, str(location), str(n), str(revisions)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        for n in range(workers)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", process.stderr
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outputs = []
        for process in processes:
            out, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
            outputs.append(out.split())
        return outputs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


async def test_saves_from_eight_processes_have_exactly_one_winner_per_revision(
    subject: Subject,
) -> None:
    from tests.restart.restart_worker import CHECKPOINT
    from tests.restart.restart_worker import RUN as RACE_RUN

    revisions = 6
    outputs = await asyncio.to_thread(_race, subject.kind, subject.location, 8, revisions)
    winners: dict[int, list[int]] = {revision: [] for revision in range(1, revisions + 1)}
    for worker, words in enumerate(outputs):
        assert words[-1] == "done"
        pairs = list(zip(words[:-1:2], map(int, words[1:-1:2]), strict=True))
        assert [revision for _, revision in pairs] == list(range(1, revisions + 1))
        assert {outcome for outcome, _ in pairs} <= {"won", "conflict"}
        for outcome, revision in pairs:
            if outcome == "won":
                winners[revision].append(worker)
    assert all(len(won) == 1 for won in winners.values()), winners
    loaded = await subject.store.load(RACE_RUN, CHECKPOINT)
    assert loaded == RestartCheckpoint(
        RACE_RUN, CHECKPOINT, revisions, {"worker": winners[revisions][0], "revision": revisions}
    )
