"""Schedules: ``runner.schedule`` stores a cron schedule; serving processes start each tick's
run exactly once, missed ticks run once or are skipped, and ``zincir schedules`` pauses,
resumes and deletes them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from tests.agent.runner_agents import KEYS_ENV, agent
from tests.helpers import select
from zincir import InvalidInput
from zincir.agent import Runner
from zincir.agent import _schedule as schedule_module
from zincir.agent._schedule import ScheduleTicker, tick_run_id
from zincir.cli import main
from zincir.store import Store
from zincir.testing import FakeClock

WORKER = Path(__file__).with_name("schedule_worker.py")
REPO = Path(__file__).resolve().parents[2]
START = datetime(2030, 1, 1, tzinfo=UTC)


def at(minutes: int, seconds: float = 0) -> datetime:
    return START + timedelta(minutes=minutes, seconds=seconds)


async def scheduled(store: Store, name: str = "every-minute") -> list[str]:
    """The ids of the runs schedule ``name`` started, oldest first."""
    runs = await store.list_runs(limit=10_000)
    return sorted(run["id"] for run in runs if run["id"].startswith(f"schedule-{name}-"))


async def test_invalid_cron_or_timezone_stores_nothing(store: Store) -> None:
    runner = Runner(store, [agent])
    with pytest.raises(InvalidInput, match=r"cron expression '61 \* \* \* \*' is invalid"):
        await runner.schedule("bad", cron="61 * * * *", agent=agent, prompt="p")
    with pytest.raises(InvalidInput, match="'Mars/Olympus' is not a known IANA time zone"):
        await runner.schedule(
            "bad", cron="0 7 * * *", agent=agent, prompt="p", timezone="Mars/Olympus"
        )
    with pytest.raises(InvalidInput, match="missed must be 'run_once' or 'skip'"):
        await runner.schedule("bad", cron="0 7 * * *", agent=agent, prompt="p", missed="all")
    with pytest.raises(InvalidInput, match="cron expression '\\* \\* \\*' is invalid"):
        await runner.schedule("bad", cron="* * *", agent=agent, prompt="p")
    with pytest.raises(InvalidInput, match="serves no agent named 'nobody'"):
        await runner.schedule("bad", cron="0 7 * * *", agent="nobody", prompt="p")
    assert await store.list_schedules() == []


async def test_declaring_again_is_a_no_op_and_new_settings_update(store: Store) -> None:
    runner = Runner(store, [agent])
    first = dict(cron="0 7 * * *", agent=agent, prompt="report", timezone="Europe/Oslo")
    assert await runner.schedule("daily", **first) == "created"  # type: ignore[arg-type]
    stored = await store.get_schedule("daily")
    assert await runner.schedule("daily", **first) == "unchanged"  # type: ignore[arg-type]
    assert await store.get_schedule("daily") == stored
    assert await runner.schedule("daily", cron="0 8 * * *", agent=agent, prompt="report") == (
        "updated"
    )
    record = await store.get_schedule("daily")
    assert record is not None and stored is not None
    assert (record.spec.cron, record.spec.timezone, record.spec.prompt) == (
        "0 8 * * *",
        "UTC",
        "report",
    )
    assert record.created_at == stored.created_at


async def test_ticks_in_a_time_zone(fake_store: Store, clock: FakeClock) -> None:
    runner = Runner(fake_store, [agent])
    await runner.schedule("oslo", cron="0 7 * * *", agent=agent, prompt="p", timezone="Europe/Oslo")
    ticker = ScheduleTicker(fake_store, {"weather": agent})
    await ticker.look()
    clock.advance(6 * 3600 + 1)  # 06:00:01 UTC is 07:00:01 in Oslo (winter, UTC+1)
    await ticker.look()
    assert await scheduled(fake_store, "oslo") == ["schedule-oslo-20300101T060000Z"]


async def test_a_missed_tick_runs_once(fake_store: Store, clock: FakeClock) -> None:
    runner = Runner(fake_store, [agent])
    await runner.schedule("every-minute", cron="* * * * *", agent=agent, prompt="p")
    clock.advance(10 * 60 + 0.5)  # nothing served for ten minutes
    first = ScheduleTicker(fake_store, {"weather": agent})
    await first.look()
    assert await scheduled(fake_store) == [tick_run_id("every-minute", at(10))]
    record = await fake_store.get_schedule("every-minute")
    assert record is not None
    assert (record.last_tick, record.last_run_id) == (at(10), tick_run_id("every-minute", at(10)))
    clock.advance(59.0)  # 00:10:59.5: it sleeps until the next tick, half a second away
    assert await first.look() == pytest.approx(0.5)
    clock.advance(0.6)
    second = ScheduleTicker(fake_store, {"weather": agent})  # another process starting now
    await second.look()
    await first.look()
    await second.look()
    assert await scheduled(fake_store) == [
        tick_run_id("every-minute", at(10)),
        tick_run_id("every-minute", at(11)),
    ]
    runs = {run["id"]: run for run in await fake_store.list_runs()}
    assert runs[tick_run_id("every-minute", at(11))]["status"] == "pending"


async def test_a_missed_tick_is_skipped(fake_store: Store, clock: FakeClock) -> None:
    runner = Runner(fake_store, [agent])
    await runner.schedule("every-minute", cron="* * * * *", agent=agent, prompt="p", missed="skip")
    clock.advance(10 * 60 + 0.5)
    ticker = ScheduleTicker(fake_store, {"weather": agent})
    await ticker.look()
    assert await scheduled(fake_store) == []
    clock.advance(60)
    await ticker.look()
    assert await scheduled(fake_store) == [tick_run_id("every-minute", at(11))]


async def test_a_paused_schedule_starts_nothing(fake_store: Store, clock: FakeClock) -> None:
    runner = Runner(fake_store, [agent])
    await runner.schedule("every-minute", cron="* * * * *", agent=agent, prompt="p")
    ticker = ScheduleTicker(fake_store, {"weather": agent})
    clock.advance(30)
    await ticker.look()
    assert await fake_store.pause_schedule("every-minute", True) is True
    assert await fake_store.pause_schedule("every-minute", True) is False
    for _ in range(3):
        clock.advance(60)
        await ticker.look()
    assert await scheduled(fake_store) == []
    assert await fake_store.pause_schedule("every-minute", False) is True  # at 00:03:30
    clock.advance(40)
    await ticker.look()
    assert await scheduled(fake_store) == [tick_run_id("every-minute", at(4))]
    assert await fake_store.pause_schedule("nothing", True) is None


async def test_a_process_starts_only_the_schedules_of_its_agents(
    fake_store: Store, clock: FakeClock
) -> None:
    runner = Runner(fake_store, [agent])
    await runner.schedule("every-minute", cron="* * * * *", agent=agent, prompt="p")
    other = ScheduleTicker(fake_store, {})  # a process serving other agents
    await other.look()
    clock.advance(90)
    await other.look()
    assert await scheduled(fake_store) == []


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


async def test_cli_lists_pauses_resumes_and_deletes(store_target: str) -> None:
    async with Runner(store_target, [agent]) as runner:
        empty = await asyncio.to_thread(cli, "schedules", "list", "--db", store_target)
        assert empty == (0, "no schedules\n")
        await runner.schedule("daily", cron="0 7 * * *", agent=agent, prompt="p")
        await runner.schedule("hourly", cron="0 * * * *", agent=agent, prompt="p")
    listed = await asyncio.to_thread(cli, "schedules", "list", "--db", store_target)
    assert listed[0] == 0, listed
    lines = listed[1].splitlines()
    assert lines[0].split()[:4] == ["NAME", "STATE", "CRON", "TIMEZONE"]
    assert lines[1].split()[:2] == ["daily", "active"] and "0 7 * * *" in lines[1]
    assert lines[2].split()[:2] == ["hourly", "active"]
    paused = await asyncio.to_thread(cli, "schedules", "pause", "daily", "--db", store_target)
    assert paused == (0, "paused schedule daily\n")
    again = await asyncio.to_thread(cli, "schedules", "pause", "daily", "--db", store_target)
    assert again == (0, "schedule daily was already paused\n")
    listed = await asyncio.to_thread(cli, "schedules", "list", "--db", store_target)
    assert listed[1].splitlines()[1].split()[:2] == ["daily", "paused"]
    resumed = await asyncio.to_thread(cli, "schedules", "resume", "daily", "--db", store_target)
    assert resumed == (0, "resumed schedule daily\n")
    deleted = await asyncio.to_thread(cli, "schedules", "delete", "hourly", "--db", store_target)
    assert deleted == (0, "deleted schedule hourly\n")
    missing = await asyncio.to_thread(cli, "schedules", "delete", "hourly", "--db", store_target)
    assert missing[0] == 1 and "no schedule named 'hourly'" in missing[1]
    listed = await asyncio.to_thread(cli, "schedules", "list", "--db", store_target)
    assert [line.split()[:2] for line in listed[1].splitlines()[1:]] == [["daily", "active"]]


def _serve(target: str, seconds: float, keys: Path) -> subprocess.Popen[str]:
    env = {**os.environ, KEYS_ENV: str(keys), "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), target, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


async def test_three_processes_start_each_tick_once(store_target: str, tmp_path: Path) -> None:
    """A schedule ticking every second, served by three processes for 10 s: each tick in
    the window has exactly one run, none is missing, and each run's tool ran once."""
    keys = tmp_path / "keys.txt"
    async with Runner(store_target, [agent]) as runner:
        await runner.schedule("every-second", cron="* * * * * *", agent=agent, prompt="tick")
    workers = [_serve(store_target, 10.0, keys) for _ in range(3)]
    try:
        outputs = [await asyncio.to_thread(worker.communicate, timeout=90) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        assert out.splitlines() == ["serving", "done"], (out, err)
    async with Runner(store_target, [agent]) as runner:  # finish a tick started at the end
        await runner.store.pause_schedule("every-second", True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = [run for run in await runner.store.list_runs(limit=1000)]
            if all(run["status"] == "completed" for run in runs):
                break
            await runner.serve(asyncio.sleep(0.5), poll_interval=0.05)
        ids = await scheduled(runner.store, "every-second")
        statuses = {run["id"]: run["status"] for run in await runner.store.list_runs(limit=1000)}
    ticks = [datetime.strptime(i.rsplit("-", 1)[1], "%Y%m%dT%H%M%SZ") for i in ids]
    assert len(ticks) >= 8, ids
    gaps = [(a, b) for a, b in zip(ticks, ticks[1:], strict=False) if b - a != timedelta(seconds=1)]
    assert gaps == [], ids
    assert {statuses[i] for i in ids} == {"completed"}
    tools = [line.split()[0] for line in keys.read_text().splitlines()]
    assert sorted(tools) == ids  # each run's tool ran exactly once


async def test_a_tick_can_wait_in_a_queue(fake_store: Store, clock: FakeClock) -> None:
    runner = Runner(fake_store, [agent])
    queue = zincir.Queue("nightly", concurrency=1)
    await runner.schedule("every-minute", cron="* * * * *", agent=agent, prompt="p", queue=queue)
    record = await fake_store.get_schedule("every-minute")
    assert record is not None and record.spec.queue == "nightly"
    ticker = ScheduleTicker(fake_store, {"weather": agent})
    await ticker.look()
    clock.advance(60)
    await ticker.look()
    run_id = tick_run_id("every-minute", at(1))
    assert await scheduled(fake_store) == [run_id]
    places = await fake_store.queued_runs([run_id])
    assert (places[run_id].queue, places[run_id].waiting) == ("nightly", True)
    with pytest.raises(InvalidInput, match="queue must be a zincir.Queue"):
        await runner.schedule("x", cron="* * * * *", agent=agent, prompt="p", queue="nightly")  # type: ignore[arg-type]


async def test_an_encrypted_store_seals_the_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZINCIR_ENCRYPTION_KEYS", raising=False)
    keys = zincir.Encryption({"t": zincir.Encryption.generate_key()}, "t")
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys.to_json())
    path = str(tmp_path / "sealed.db")
    store = zincir.open_store(path, encryption=keys)
    async with Runner(store, [agent]) as runner:
        await runner.schedule("daily", cron="0 7 * * *", agent=agent, prompt="secret prompt")
    record = await store.get_schedule("daily")
    assert record is not None and record.spec.prompt == "secret prompt"
    await store.close()
    (raw,) = select(path, "SELECT prompt FROM schedules")[0]
    assert b"secret" not in (raw if isinstance(raw, bytes) else str(raw).encode())
    listed = await asyncio.to_thread(
        cli, "schedules", "list", "--db", path, "--key-file", str(key_file)
    )
    assert listed[0] == 0 and listed[1].splitlines()[1].split()[:2] == ["daily", "active"]


async def test_a_stalled_process_catches_up_in_batches(
    fake_store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_module, "_MAX_TICKS", 5)
    runner = Runner(fake_store, [agent])
    await runner.schedule("every-second", cron="* * * * * *", agent=agent, prompt="p")
    ticker = ScheduleTicker(fake_store, {"weather": agent})
    await ticker.look()
    clock.advance(12.5)  # the process stalled for twelve ticks: it was serving all along
    delays = [await ticker.look() for _ in range(3)]
    assert delays[:2] == [0.0, 0.0] and delays[2] == pytest.approx(0.5)
    expected = [tick_run_id("every-second", at(0, second)) for second in range(1, 13)]
    assert await scheduled(fake_store, "every-second") == expected
