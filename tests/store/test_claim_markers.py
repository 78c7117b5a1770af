"""open_store(claim_markers=True): step claims as markers in a file beside the database, one
transaction a step, adopted as claim rows once their process is gone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO
from tests.helpers import rows
from zincir import FencedOut, InvalidInput, StepInProgress, WorkflowContext
from zincir.store.sqlite import _markers

ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
TTL = timedelta(seconds=30)


def marker_files(db_path: Path) -> list[Path]:
    folder = Path(f"{db_path}-claims")
    return sorted(folder.glob("*.claims")) if folder.exists() else []


def marker_lines(db_path: Path) -> list[list[object]]:
    return [
        json.loads(line) for file in marker_files(db_path) for line in file.read_text().splitlines()
    ]


def commits(store: zincir.SQLiteStore) -> int:
    stats = store.writer_stats
    return stats.inline_commits + stats.batch_commits


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60
    )


async def test_a_marked_step_is_one_commit_and_its_claim_row_comes_with_its_result(
    db_path: Path,
) -> None:
    seen_during_body: list[object] = []
    async with zincir.open_store(db_path, claim_markers=True) as store:
        assert isinstance(store, zincir.SQLiteStore)
        wf = await WorkflowContext.open(store, "marked")
        before = commits(store)

        def body() -> int:
            seen_during_body.append(rows(db_path, "SELECT name FROM step_claims"))
            seen_during_body.append([line[:3] for line in marker_lines(db_path)])
            return 7

        assert await wf.step("one", body) == 7
        assert commits(store) - before == 1
        assert seen_during_body == [[], [["c", "marked", "one"]]]
        assert rows(db_path, "SELECT name, status, claim_token, result FROM steps") == [
            ("one", "completed", 1, "7")
        ]
        await wf.complete(None)

    async with zincir.open_store(db_path) as store:  # the default commits the claim
        assert isinstance(store, zincir.SQLiteStore)
        wf = await WorkflowContext.open(store, "committed")
        before = commits(store)
        await wf.step("one", lambda: 1)
        assert commits(store) - before == 2
        await wf.complete(None)
    assert not Path(f"{db_path}-claims").exists()  # deleted on close, folder too


async def test_a_replay_reads_the_stored_results_and_writes_no_marker(db_path: Path) -> None:
    async with zincir.open_store(db_path, claim_markers=True) as store:
        wf = await WorkflowContext.open(store, "again", lease_ttl=timedelta(seconds=1))
        assert [await wf.step(f"s{i}", lambda i=i: i * 10) for i in range(3)] == [0, 10, 20]
        await wf.close()
        wf = await WorkflowContext.open(store, "again")
        assert [await wf.step(f"s{i}", lambda: "ran again") for i in range(3)] == [0, 10, 20]
        assert len(marker_lines(db_path)) == 3  # the first run's claims only
        await wf.complete(None)


async def test_another_live_store_does_not_see_a_marked_claim(db_path: Path) -> None:
    """The guarantee this mode gives up: another process (here, another store) cannot see the
    claim while its store lives; it sees it once that store is gone."""
    release = asyncio.Event()
    async with zincir.open_store(db_path, claim_markers=True) as marked:
        wf = await WorkflowContext.open(marked, "shared")

        async def body() -> str:
            await release.wait()
            return "done"

        running = asyncio.create_task(wf.step("slow", body))
        await asyncio.sleep(0.05)
        async with zincir.open_store(db_path) as other:
            assert await other.list_runs()  # it reads the run, and adopts nothing
            assert rows(db_path, "SELECT name FROM step_claims") == []
        assert len(marker_files(db_path)) == 1  # a live store's file is left alone
        release.set()
        assert await running == "done"
        await wf.complete(None)
    assert rows(db_path, "SELECT name, status FROM steps") == [("slow", "completed")]


def test_a_raising_body_releases_its_mark_so_a_crash_after_it_claims_nothing(
    db_path: Path,
) -> None:
    killed = run_script(
        f"""
        import asyncio, os, signal
        import zincir
        from zincir import WorkflowContext

        def fails():
            raise ValueError("no")

        async def main():
            store = zincir.open_store({str(db_path)!r}, claim_markers=True)
            wf = await WorkflowContext.open(store, "raised", lease_ttl=0.2)
            await wf.step("ok", lambda: 1)
            try:
                await wf.step("flaky", fails)
            except ValueError:
                pass
            await wf.step("held", lambda: os.kill(os.getpid(), signal.SIGKILL))

        asyncio.run(main())
        """
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    lines = [line[:3] for line in marker_lines(db_path)]
    assert lines == [
        ["c", "raised", "ok"],
        ["c", "raised", "flaky"],
        ["r", "raised", "flaky"],
        ["c", "raised", "held"],
    ]
    store = zincir.open_store(db_path)  # adopts the dead file
    try:
        assert rows(db_path, "SELECT name, status FROM steps ORDER BY name") == [
            ("held", "running"),
            ("ok", "completed"),
        ]
    finally:
        store.close_sync()
    assert marker_files(db_path) == []


async def test_a_takeover_in_this_process_finds_the_old_leases_marked_claim_held(
    db_path: Path,
) -> None:
    async with zincir.open_store(db_path, claim_markers=True) as store:
        old = await store.create_run("taken", name="t", owner="old", ttl=TTL)
        assert (await store.claim_step(old, "s")).status == "claimed"
        new = await store.acquire_run("taken", owner="new", ttl=TTL, force=True)
        held = await store.claim_step(new, "s")
        assert (held.status, held.owner, held.token) == ("held", "old", 1)
        with pytest.raises(FencedOut):
            await store.finish_step(old, "s", '"late"')
        with pytest.raises(FencedOut):
            await store.abandon_step(old, "s")
        assert await store.recover_steps(new) == ["s"]
        assert (await store.claim_step(new, "s")).status == "claimed"
        await store.finish_step(new, "s", '"new"')
        assert (await store.claim_step(new, "s")).result == "new"
        recovered = [
            e.payload for e in await store.list_events("taken") if e.type == "steps_recovered"
        ]
        assert recovered == [{"names": ["s"]}]
        assert rows(db_path, "SELECT claim_owner, claim_token, result FROM steps") == [
            ("new", 2, '"new"')
        ]


async def test_recover_keeps_this_leases_bodies_in_flight(db_path: Path) -> None:
    async with zincir.open_store(db_path, claim_markers=True) as store:
        lease = await store.create_run("both", name="t", owner="me", ttl=TTL)
        for name in ("a", "b"):
            assert (await store.claim_step(lease, name)).status == "claimed"
        assert await store.recover_steps(lease, in_flight={"a"}) == ["b"]
        await store.finish_step(lease, "a", "1")
        with pytest.raises(StepInProgress, match="released"):
            await store.finish_step(lease, "b", "2")
        assert rows(db_path, "SELECT name, status FROM steps") == [("a", "completed")]


async def test_the_claim_ahead_is_a_marker_and_refused_where_the_step_has_a_row(
    db_path: Path,
) -> None:
    async with zincir.open_store(db_path, claim_markers=True) as store:
        lease = await store.create_run("ahead", name="t", owner="me", ttl=TTL)
        await store.claim_step(lease, "done")
        await store.finish_step(lease, "done", "0")
        await store.claim_step(lease, "one")
        assert await store.finish_step_and_claim(lease, "one", "1", "two") is True
        assert ["c", "ahead", "two"] in [line[:3] for line in marker_lines(db_path)]
        assert await store.finish_step_and_claim(lease, "two", "2", "done") is False
        assert rows(db_path, "SELECT name, status FROM steps ORDER BY name") == [
            ("done", "completed"),
            ("one", "completed"),
            ("two", "completed"),
        ]


async def test_closing_with_an_unfinished_marked_claim_stores_it_as_a_row(db_path: Path) -> None:
    async with zincir.open_store(db_path, claim_markers=True) as store:
        lease = await store.create_run("left", name="t", owner="me", ttl=TTL)
        await store.claim_step(lease, "open")
    assert rows(db_path, "SELECT name, status, claim_owner FROM steps") == [
        ("open", "running", "me")
    ]
    assert marker_files(db_path) == []


async def test_adoption_skips_released_claims_ended_runs_and_torn_lines(db_path: Path) -> None:
    async with zincir.open_store(db_path) as store:
        live = await store.create_run("live", name="t", owner="dead", ttl=TTL)
        ended = await store.create_run("ended", name="t", owner="dead", ttl=TTL)
        await store.finish_run(ended, "completed", result_json="null")
        del live
    folder = Path(f"{db_path}-claims")
    folder.mkdir()
    stamp = "2026-01-01T00:00:00.000000Z"
    (folder / "gone.claims").write_text(
        "\n".join(
            [
                json.dumps(["c", "live", "kept", "dead", 1, stamp]),
                json.dumps(["c", "live", "dropped", "dead", 1, stamp]),
                json.dumps(["r", "live", "dropped", 1]),
                json.dumps(["c", "ended", "late", "dead", 1, stamp]),
                json.dumps(["c", "nowhere", "x", "dead", 1, stamp]),
                '["c", "live", "torn", "de',
            ]
        )
    )
    (folder / "other.txt").write_text("not a marker file")
    async with zincir.open_store(db_path):
        pass
    assert rows(db_path, "SELECT run_id, name, status, claim_owner, started_at FROM steps") == [
        ("live", "kept", "running", "dead", stamp)
    ]
    assert sorted(path.name for path in folder.iterdir()) == ["other.txt"]


async def test_a_file_whose_claims_are_all_resolved_is_emptied(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_markers, "_TRUNCATE_AT", 300)
    async with zincir.open_store(db_path, claim_markers=True) as store:
        wf = await WorkflowContext.open(store, "many")
        for i in range(20):
            await wf.step(f"step-{i}", lambda i=i: i)
        (file,) = marker_files(db_path)
        assert file.stat().st_size < 300 + 100  # 20 lines would be ~1,400 bytes
        assert len(rows(db_path, "SELECT 1 FROM steps WHERE status = 'completed'")) == 20
        await wf.complete(None)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_claim_markers_must_be_a_bool(db_path: Path, value: object) -> None:
    with pytest.raises(InvalidInput, match="claim_markers"):
        zincir.open_store(db_path, claim_markers=value)  # type: ignore[arg-type]
    assert not db_path.exists()


def test_postgres_refuses_claim_markers() -> None:
    with pytest.raises(InvalidInput, match="claim_markers"):
        zincir.open_store("postgresql://localhost:1/none", claim_markers=True)
