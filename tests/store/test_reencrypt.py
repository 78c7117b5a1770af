"""Key rotation and sealing an existing database (``zincir.store.reencrypt``, ``zincir
reencrypt``), on both backends: runs continue across a rotation and replay without running a
step again; a reencrypt SIGKILLed midway completes when run again; a plain database is
sealed while a run goes on; a tampered byte, a missing key and a database opened without its
keys are refused, naming the run or the key id, never showing a key."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import apsw
import pytest

import zincir
import zincir.store._reencrypt as reencrypt_module
from tests.agent.openai_server import ChatServer
from tests.conftest import REPO
from tests.helpers import is_postgres, select
from tests.integration.test_encryption_canary import (
    assert_the_apis_give_it_back,
    leaks_of,
    put_the_canary_everywhere,
    raw_file_leaks,
    read_back,
)
from zincir import Encryption, EncryptionKeyMissing, PayloadTampered
from zincir._encryption import KEYS_ENV, key_id_of
from zincir.store import reencrypt
from zincir.store._sealing import SEALED_COLUMNS, SEALED_ROWS
from zincir.workflow import WorkflowContext

KEYS = {"A": Encryption.generate_key(), "B": Encryption.generate_key()}
CANARY = "canary-7f3a"
WORKFLOW = "wf-main"
AGENT = "a-agent"


def keys(*ids: str, active: str) -> Encryption:
    return Encryption({key_id: KEYS[key_id] for key_id in ids}, active)


@pytest.fixture(autouse=True)
def _no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gives its keys itself (a plain store is one opened without them)."""
    monkeypatch.delenv(KEYS_ENV, raising=False)


async def run_steps(
    target: str, encryption: Encryption | None, names: list[str], calls: list[str]
) -> list[Any]:
    """Open the workflow run on ``target`` and run ``names`` as its steps; ``calls`` gets
    the name of each step whose body ran (a replayed one does not)."""
    store = zincir.open_store(target, encryption=encryption)
    try:
        wf = await WorkflowContext.open(store, WORKFLOW, config={"secret": CANARY})
        results = []
        for name in names:

            async def body(name: str = name) -> dict[str, str]:
                calls.append(name)
                return {"value": f"{CANARY}-{name}"}

            results.append(await wf.step(name, body))
        await wf.close()
        return results
    finally:
        await store.close()


async def agent_run(target: str, encryption: Encryption | None) -> None:
    """A completed agent run: sealed config, a model response and a result."""
    store = zincir.open_store(target, encryption=encryption)
    try:
        ctx = await zincir.AgentContext.create(
            store, "agent", config={"prompt": CANARY}, run_id=AGENT
        )
        await ctx.record_response(f"answer {CANARY}")
        await ctx.complete({"answer": CANARY})
    finally:
        await store.close()


def census(target: str) -> dict[str, Counter[str | None]]:
    """The key id of every stored payload (None: plain), by table and column, read raw."""
    found: dict[str, Counter[str | None]] = {}
    for table, columns in SEALED_COLUMNS.items():
        for column in columns:
            values = select(target, f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")
            if values:
                found[f"{table}.{column}"] = Counter(key_id_of(value) for (value,) in values)
    return found


def key_ids(target: str) -> set[str | None]:
    return {key_id for counts in census(target).values() for key_id in counts}


def state(target: str) -> str | None:
    found = select(target, "SELECT state FROM store_encryption")
    return None if not found else str(found[0][0])


def write_raw(target: str, statement: str, params: tuple[Any, ...]) -> None:
    """Change the database behind zincir's back (the tampering under test)."""
    if not is_postgres(target):
        conn = apsw.Connection(target)
        conn.set_busy_timeout(10_000)
        try:
            conn.execute(statement, params)
        finally:
            conn.close()
        return
    import psycopg
    from psycopg import sql as pgsql

    from zincir.store.postgres._base import split_schema

    conninfo, schema, _ = split_schema(target)
    with psycopg.connect(conninfo) as conn:
        conn.execute(pgsql.SQL("SET search_path TO {}").format(pgsql.Identifier(schema)))
        conn.execute(statement.replace("?", "%s"), params)


def flipped(value: Any) -> Any:
    """A sealed value with its last byte (in the tag) changed."""
    if isinstance(value, str):
        envelope = bytearray(base64.b64decode(value[4:]))
        envelope[-1] ^= 1
        return "zs1:" + base64.b64encode(bytes(envelope)).decode("ascii")
    envelope = bytearray(value)
    envelope[-1] ^= 1
    return bytes(envelope)


def cli(target: str, key_file: Path, *args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    """``zincir reencrypt`` in a child process (without the test's environment keys)."""
    environment = {k: v for k, v in os.environ.items() if k != KEYS_ENV}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "zincir", "reencrypt", "--db", target, "--key-file", str(key_file)]
        + list(args),
        capture_output=True,
        text=True,
        env={**environment, **(env or {})},
        timeout=120,
    )


def unique_keys(target: str, table: str) -> set[tuple[str, ...]]:
    """The column lists of ``table``'s primary key and unique indexes, as the backend has
    them."""
    if is_postgres(target):
        from zincir.store.postgres._base import split_schema

        _, schema, _ = split_schema(target)
        found = select(
            target,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = ? AND tablename = ?",
            (schema, table),
        )
        return {
            tuple(c.strip() for c in definition.rsplit("(", 1)[1].rstrip(")").split(","))
            for (definition,) in found
            if "UNIQUE" in definition and " WHERE " not in definition
        }
    keys = {
        tuple(
            name
            for (name,) in select(
                target, "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)
            )
        )
        for (index,) in select(
            target,
            'SELECT name FROM pragma_index_list(?) WHERE "unique" = 1 AND partial = 0',
            (table,),
        )
    }
    primary = select(
        target, "SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", (table,)
    )
    return keys | {tuple(name for (name,) in primary)}


async def test_every_sealed_table_is_walked_by_a_unique_key(store_target: str) -> None:
    assert set(SEALED_ROWS) == set(SEALED_COLUMNS)
    await (zincir.open_store(store_target)).close()
    for table, (key, _) in SEALED_ROWS.items():
        assert key in unique_keys(store_target, table), table


async def test_a_run_started_under_a_continues_after_rotation_to_b(store_target: str) -> None:
    calls: list[str] = []
    first = await run_steps(store_target, keys("A", active="A"), ["s1", "s2"], calls)
    await agent_run(store_target, keys("A", active="A"))
    assert key_ids(store_target) == {"A"}
    # Rotation: the processes seal with B from now on (A still opens), then reencrypt --to B.
    more = await run_steps(store_target, keys("A", "B", active="B"), ["s1", "s2", "s3"], calls)
    assert more[:2] == first and calls == ["s1", "s2", "s3"]
    assert key_ids(store_target) == {"A", "B"}
    report = await reencrypt(store_target, keys("A", "B", active="B"), to="B", batch=3)
    assert report.to == "B" and not report.sealed and report.left == 0
    resealed = {table.table: table.resealed for table in report.tables}
    assert resealed["agent_runs"] == 2 and resealed["events"] > 0
    assert key_ids(store_target) == {"B"}
    assert select(store_target, "SELECT key_id FROM sealing_keys ORDER BY key_id") == [
        ("A",),
        ("B",),
    ]
    # With A and B, then with B alone: the run replays its steps without running them.
    again = await run_steps(store_target, keys("A", "B", active="B"), ["s1", "s2", "s3"], calls)
    last = await run_steps(store_target, keys("B", active="B"), ["s1", "s2", "s3", "s4"], calls)
    assert again == more and last[:3] == more
    assert calls == ["s1", "s2", "s3", "s4"]
    store = zincir.open_store(store_target, encryption=keys("B", active="B"))
    try:
        run = await store.get_run(AGENT)
        assert run is not None and CANARY in (run["result"] or "") and CANARY in run["config"]
    finally:
        await store.close()
    # A second run finds everything under B: it reseals nothing.
    assert (await reencrypt(store_target, keys("B", active="B"))).resealed == 0


@pytest.mark.parametrize(
    "point", ["store.after_begin:4", "store.after_statements:4", "store.after_commit:4"]
)
async def test_reencrypt_killed_midway_then_run_again_completes(
    store_target: str, tmp_path: Path, point: str
) -> None:
    """SIGKILLed in its fourth write transaction (the key check, the run row, then batches
    of two events): begun, written but not committed, committed. Run again, it completes."""
    calls: list[str] = []
    names = [f"s{i}" for i in range(12)]
    await run_steps(store_target, keys("A", active="A"), names, calls)
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys("A", "B", active="B").to_json())
    killed = cli(
        store_target,
        key_file,
        "--to",
        "B",
        "--batch",
        "2",
        env={"ZINCIR_CRASH_AT": point},
    )
    assert killed.returncode == -9, killed.stderr
    assert key_ids(store_target) == {"A", "B"}  # the run row and a batch or two resealed
    done = cli(store_target, key_file, "--to", "B", "--batch", "2")
    assert done.returncode == 0, done.stderr
    assert "events:" in done.stdout and "rows resealed with key 'B'" in done.stdout
    assert key_ids(store_target) == {"B"}
    assert await run_steps(store_target, keys("B", active="B"), names, calls) == [
        {"value": f"{CANARY}-{name}"} for name in names
    ]
    assert calls == names


async def test_a_plain_database_is_sealed_while_a_run_goes_on(
    store_target: str, tmp_path: Path
) -> None:
    calls: list[str] = []
    await agent_run(store_target, None)
    await run_steps(store_target, None, ["s1", "s2"], calls)
    assert key_ids(store_target) == {None} and state(store_target) is None
    with pytest.raises(zincir.InvalidInput, match="zincir reencrypt"):
        zincir.open_store(store_target, encryption=keys("A", active="A"))
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys("A", active="A").to_json())
    plain = zincir.open_store(store_target)
    # Killed after sealing the first run row (the key check, then one row a batch): the
    # workflow's row is still plain, and the database is being sealed.
    killed = cli(
        store_target,
        key_file,
        "--to",
        "A",
        "--batch",
        "1",
        env={"ZINCIR_CRASH_AT": "store.after_commit:2"},
    )
    assert killed.returncode == -9, killed.stderr
    assert state(store_target) == "sealing"
    assert census(store_target)["agent_runs.config"] == Counter({"A": 1, None: 1})
    # A process with the key goes on meanwhile: it takes the plain row's lease and writes.
    assert len(await run_steps(store_target, keys("A", active="A"), ["s1", "s2", "s3"], calls)) == 3
    assert calls == ["s1", "s2", "s3"]
    # A process that opened it plain before is refused its next plain write; a new one
    # without the key cannot open it.
    with pytest.raises(zincir.ZincirError, match="plain value written to restart_checkpoints"):
        await plain.save_restart_checkpoint(WORKFLOW, "cp", 1, '{"v": 1}')
    await plain.close()
    with pytest.raises(EncryptionKeyMissing, match="key ids: A"):
        zincir.open_store(store_target)
    done = cli(store_target, key_file, "--to", "A")
    assert done.returncode == 0, done.stderr
    assert "is sealed now" in done.stdout
    assert state(store_target) == "sealed" and key_ids(store_target) == {"A"}
    with pytest.raises(EncryptionKeyMissing, match="key ids: A"):
        zincir.open_store(store_target)
    assert len(await run_steps(store_target, keys("A", active="A"), ["s1", "s2", "s3"], calls)) == 3
    assert calls == ["s1", "s2", "s3"]


async def test_sealing_through_the_api_reports_it(store_target: str) -> None:
    await agent_run(store_target, None)
    report = await reencrypt(store_target, keys("A", active="A"))
    assert report.sealed and report.to == "A"
    assert {t.table: t.resealed for t in report.tables}["agent_runs"] == 1
    assert state(store_target) == "sealed"
    assert select(store_target, "SELECT key_id FROM sealing_keys") == [("A",)]


async def test_a_tampered_byte_is_refused_naming_the_run(store_target: str) -> None:
    calls: list[str] = []
    await run_steps(store_target, keys("A", active="A"), ["s1", "s2"], calls)
    seq, payload = select(
        store_target,
        "SELECT seq, payload FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
        (WORKFLOW,),
    )[0]
    write_raw(
        store_target,
        "UPDATE events SET payload = ? WHERE run_id = ? AND seq = ?",
        (flipped(payload), WORKFLOW, seq),
    )
    with pytest.raises(PayloadTampered) as tampered:
        await run_steps(store_target, keys("A", active="A"), ["s1", "s2"], calls)
    assert tampered.value.run_id == WORKFLOW
    with pytest.raises(PayloadTampered) as walked:
        await reencrypt(store_target, keys("A", "B", active="B"))
    assert walked.value.run_id == WORKFLOW and "events.payload" in str(walked.value)
    assert calls == ["s1", "s2"]


async def test_a_value_under_a_key_not_given_names_the_key(store_target: str) -> None:
    calls: list[str] = []
    await run_steps(store_target, keys("A", active="A"), ["s1"], calls)
    with pytest.raises(EncryptionKeyMissing) as missing:
        await reencrypt(store_target, keys("B", active="B"))
    assert missing.value.key_id == "A" and missing.value.run_id == WORKFLOW
    assert "'A'" in str(missing.value)
    for key in KEYS.values():
        assert base64.b64encode(key).decode() not in str(missing.value)
    with pytest.raises(EncryptionKeyMissing) as opened:
        await run_steps(store_target, keys("B", active="B"), ["s1"], calls)
    assert opened.value.key_id == "A"
    wrong = Encryption({"A": Encryption.generate_key(), "B": KEYS["B"]}, "B")
    with pytest.raises(PayloadTampered, match="not the key"):
        await reencrypt(store_target, wrong)
    assert key_ids(store_target) == {"A"}


async def test_an_encrypted_database_is_refused_without_its_keys(store_target: str) -> None:
    await agent_run(store_target, keys("A", active="A"))
    with pytest.raises(EncryptionKeyMissing, match="key ids: A"):
        zincir.open_store(store_target)
    store = zincir.open_store(store_target, encryption=keys("A", active="A"))
    await store.close()


async def test_a_plain_store_object_is_sealed_only_by_its_path(tmp_path: Path) -> None:
    store = zincir.open_store(tmp_path / "plain.db")
    try:
        with pytest.raises(zincir.InvalidInput, match="opened with encryption="):
            await reencrypt(store, keys("A", active="A"))
    finally:
        await store.close()
    with pytest.raises(zincir.InvalidInput, match="batch"):
        await reencrypt(tmp_path / "plain.db", keys("A", active="A"), batch=0)
    with pytest.raises(zincir.InvalidInput, match="'C'"):
        await reencrypt(tmp_path / "plain.db", keys("A", active="A"), to="C")
    with pytest.raises(zincir.NotAZincirDatabase):
        await reencrypt(tmp_path / "typo.db", keys("A", active="A"))
    assert not (tmp_path / "typo.db").exists()


@pytest.mark.parametrize("attempts", [5, 1])
async def test_a_row_rewritten_during_the_walk_is_not_overwritten(
    store_target: str, monkeypatch: pytest.MonkeyPatch, attempts: int
) -> None:
    """A live run rewrites a row between the walk's read and its swap: the swap misses, the
    row is read again and resealed; with no attempt left it is reported left as it is."""
    monkeypatch.setattr(reencrypt_module, "_ATTEMPTS", attempts)
    calls: list[str] = []
    await run_steps(store_target, keys("A", active="A"), ["s1"], calls)
    live = zincir.open_store(store_target, encryption=keys("A", active="A"))
    walker = zincir.open_store(store_target, encryption=keys("A", "B", active="B"))
    try:
        await live.save_restart_checkpoint(WORKFLOW, "cp", 1, '{"v": "first"}')
        loop = asyncio.get_running_loop()
        read, resume = asyncio.Event(), threading.Event()
        page = reencrypt_module._page

        def paused(table: Any, *args: Any) -> Any:
            found = page(table, *args)
            if table.name == "restart_checkpoints" and not resume.is_set():
                loop.call_soon_threadsafe(read.set)
                assert resume.wait(30)
            return found

        monkeypatch.setattr(reencrypt_module, "_page", paused)
        walk = asyncio.create_task(reencrypt(walker, keys("A", "B", active="B"), batch=10))
        await asyncio.wait_for(read.wait(), 30)
        # A live run (still sealing with A) writes a new revision between read and swap.
        await live.save_restart_checkpoint(WORKFLOW, "cp", 2, '{"v": "second"}')
        resume.set()
        report = await walk
        stored = await walker.load_restart_checkpoint(WORKFLOW, "cp")
        assert stored is not None and stored.revision == 2 and "second" in stored.payload_json
        resealed = {table.table: table for table in report.tables}["restart_checkpoints"]
        if attempts > 1:
            assert report.left == 0 and resealed.resealed == 1
            assert census(store_target)["restart_checkpoints.payload"] == Counter({"B": 1})
        else:
            assert report.left == 1 and resealed.resealed == 0 and resealed.left == 1
            assert census(store_target)["restart_checkpoints.payload"] == Counter({"A": 1})
    finally:
        await live.close()
        await walker.close()


async def test_keys_never_appear_in_the_output(store_target: str, tmp_path: Path) -> None:
    calls: list[str] = []
    await run_steps(store_target, keys("A", active="A"), ["s1"], calls)
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys("A", "B", active="B").to_json())
    done = cli(store_target, key_file, "--to", "B")
    wrong = cli(store_target, key_file, "--to", "C")
    assert done.returncode == 0 and wrong.returncode == 1 and "'C'" in wrong.stderr
    for key in KEYS.values():
        for shown in (base64.b64encode(key).decode(), key.hex()):
            for text in (done.stdout, done.stderr, wrong.stdout, wrong.stderr):
                assert shown not in text
    assert "keys given: A, B" in done.stdout


async def test_every_family_is_sealed_then_rotated_and_reads_back(
    store_target: str, server: ChatServer
) -> None:
    """The canary scenario (every kind of payload) on a plain store, sealed with A, then
    rotated to B: no column shows the canary, every value is under the key, every API
    gives it back, with B alone at the end."""
    store = zincir.open_store(store_target)
    try:
        seen = await put_the_canary_everywhere(store, server)
    finally:
        await store.close()
    assert leaks_of(store_target)
    sealed = await reencrypt(store_target, keys("A", active="A"), batch=7)
    assert sealed.sealed and sealed.left == 0
    assert leaks_of(store_target) == [] and key_ids(store_target) == {"A"}
    if not is_postgres(store_target):  # the old values linger in free pages until a vacuum
        assert raw_file_leaks(Path(store_target)) == ["zincir.db"]
    await reencrypt(store_target, keys("A", active="A"), vacuum=True)
    if not is_postgres(store_target):
        assert raw_file_leaks(Path(store_target)) == []
    rotated = await reencrypt(store_target, keys("A", "B", active="B"), batch=7)
    assert rotated.resealed == sealed.resealed and not rotated.sealed
    assert key_ids(store_target) == {"B"}
    columns = set(census(store_target))
    assert {"content.body", "stream_items.payload", "langgraph_writes.value"} <= columns
    reopened = zincir.open_store(store_target, encryption=keys("B", active="B"))
    try:
        assert_the_apis_give_it_back(seen, await read_back(reopened, server))
    finally:
        await reopened.close()
    assert leaks_of(store_target) == []


async def test_a_run_goes_on_while_the_walk_reseals_its_log(store_target: str) -> None:
    """Steps are written (under B) while the walk reseals the log (from A), in small
    batches: both finish, every value ends under B, and the run replays every step."""
    calls: list[str] = []
    first = [f"s{i}" for i in range(20)]
    await run_steps(store_target, keys("A", active="A"), first, calls)
    both = keys("A", "B", active="B")
    names = [*first, *(f"t{i}" for i in range(20))]
    walker = zincir.open_store(store_target, encryption=both)
    try:
        live = asyncio.create_task(run_steps(store_target, both, names, calls))
        overlapped: list[bool] = []
        report = await reencrypt(
            walker,
            both,
            batch=2,
            progress=lambda table: overlapped.append(table.table == "events" and not live.done()),
        )
        await live
    finally:
        await walker.close()
    assert report.left == 0 and calls == names and any(overlapped)
    assert key_ids(store_target) == {"B"}
    replayed = await run_steps(store_target, keys("B", active="B"), names, calls)
    assert replayed == [{"value": f"{CANARY}-{name}"} for name in names] and calls == names
