"""The inspector's queues: the runs list and a run's page show its queue, key, priority,
when it left the queue and the limit holding it (the text of ``runs list --stuck``); the
queues page lists each queue's limits, depth and runs, and the schedules; their JSON twins
carry the same fields; on each backend, and on an encrypted store read without its keys."""

from __future__ import annotations

import asyncio
import re
import warnings
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason='the inspector needs the "ui" extra')
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with", category=UserWarning)
    from starlette.testclient import TestClient

from click.testing import CliRunner

import zincir
from tests.inspector.conftest import ADDRESS, BASE_URL
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import XSS_PAYLOADS
from zincir._encryption import KEYS_ENV
from zincir.cli import main as cli
from zincir.inspector import create_app
from zincir.store import Store
from zincir.store._queues import QueueSettings
from zincir.store._schedules import ScheduleSpec

QUEUE = QueueSettings("mail", concurrency=1, concurrency_per_key=2)
LIVE, HIGH, LOW = "q-live", "q-high", "q-low"
HELD = "waiting in its queue: held by its queue's concurrency (1 of 1 running)"


async def fill(store: Store) -> None:
    """One run admitted (priority 9) and two waiting, with keys and priorities; a paused
    schedule with a tick started."""
    for run_id, key, priority in ((LIVE, "acme", 9), (HIGH, "acme", 5), (LOW, None, -1)):
        await store.enqueue_run(run_id, QUEUE, name="mailer", key=key, priority=priority)
    assert await store.admit_queued(None, 5) == [LIVE]  # concurrency 1 holds the others
    spec = ScheduleSpec("nightly", "0 3 * * *", "Europe/Istanbul", "mailer", "report")
    assert await store.declare_schedule(spec) == "created"
    tick = datetime.now(UTC) + timedelta(minutes=1)
    assert await store.start_schedule_tick(
        "nightly",
        cron=spec.cron,
        timezone=spec.timezone,
        tick=tick,
        run_id="schedule-nightly-1",
        config_json="{}",
    )
    assert await store.pause_schedule("nightly", True)
    for i, payload in enumerate(XSS_PAYLOADS):  # keys are a caller's text, shown inert
        await store.enqueue_run(f"x-{i}", QueueSettings("odd"), name="odd", key=payload)


def seed(target: str, encryption: zincir.Encryption | None = None) -> None:
    async def main() -> None:
        store = zincir.open_store(target, encryption=encryption)
        try:
            await fill(store)
        finally:
            await store.close()

    asyncio.run(main())


def client_for(target: str) -> TestClient:
    return TestClient(create_app(target, address=ADDRESS), base_url=BASE_URL)


def text_of(html: str) -> str:
    """A page's text, tags dropped and spaces folded."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def check(client: TestClient) -> None:
    for page in ("/", "/queues", f"/runs/{HIGH}", "/runs/x-0"):
        assert_inert(client.get(page).text)
    runs = {run["id"]: run for run in client.get("/api/runs").json()["runs"]}
    assert runs["x-0"]["queue"]["key"] == XSS_PAYLOADS[0]
    assert runs[LIVE]["queue"]["queue"] == "mail" and runs[LIVE]["queue"]["waiting"] is False
    assert runs[LIVE]["queue"]["started_at"] is not None
    high, low = runs[HIGH], runs[LOW]
    assert (high["queue"]["key"], high["queue"]["priority"]) == ("acme", 5)
    assert (low["queue"]["key"], low["queue"]["priority"]) == (None, -1)
    for run in (high, low):
        assert run["queue"]["waiting"] is True and run["queue"]["started_at"] is None
        assert run["stall"] == {"kind": "queue", "text": HELD, "next_at": None}
    assert runs["schedule-nightly-1"]["queue"] is None

    page = text_of(client.get("/").text)
    assert "mail [ acme ] p=5 waiting" in page and "mail p=-1 waiting" in page
    assert page.count(HELD) == 2

    one = client.get(f"/api/runs/{HIGH}").json()["run"]
    assert one["queue"] == high["queue"] and one["stall"]["text"] == HELD
    page = text_of(client.get(f"/runs/{HIGH}").text)
    assert "Queue mail [ acme ] p=5 waiting not started yet" in page and HELD in page
    page = text_of(client.get(f"/runs/{LIVE}").text)
    assert "Queue mail [ acme ] p=9 started from the queue" in page

    queues = client.get("/api/queues").json()
    mail, odd = sorted(queues["queues"], key=lambda queue: queue["name"] != "mail")
    assert (odd["name"], odd["waiting"], odd["live"]) == ("odd", len(XSS_PAYLOADS), 0)
    assert {k: mail[k] for k in ("name", "concurrency", "concurrency_per_key", "rate_limit")} == {
        "name": "mail",
        "concurrency": 1,
        "concurrency_per_key": 2,
        "rate_limit": None,
    }
    assert (mail["waiting"], mail["live"]) == (2, 1)
    assert [(r["run_id"], r["waiting"], r["key"], r["priority"]) for r in mail["runs"]] == [
        (LIVE, False, "acme", 9),
        (HIGH, True, "acme", 5),
        (LOW, True, None, -1),
    ]
    (nightly,) = queues["schedules"]
    assert (nightly["name"], nightly["cron"], nightly["timezone"]) == (
        "nightly",
        "0 3 * * *",
        "Europe/Istanbul",
    )
    assert nightly["paused_at"] is not None and nightly["last_tick"] is not None
    assert nightly["last_run_id"] == "schedule-nightly-1" and "prompt" not in nightly
    page = text_of(client.get("/queues").text)
    assert "mail 1 2 — 2 1" in page  # limits, waiting, holding a slot
    assert f"{HIGH} pending waiting acme 5" in page
    assert "nightly 0 3 * * * Europe/Istanbul mailer — paused" in page


def test_pages_and_apis_show_queues_and_schedules(store_target: str) -> None:
    seed(store_target)
    check(client_for(store_target))
    stuck = CliRunner().invoke(
        cli, ["runs", "list", "--db", store_target, "--stuck", "--stuck-for", "0s"]
    )
    assert stuck.exit_code == 0, stuck.output
    assert stuck.output.count(HELD) == 2  # the same text as the CLI's


def test_an_encrypted_store_read_without_keys_shows_its_queues(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    keys = zincir.Encryption({"k": zincir.Encryption.generate_key()}, "k")
    seed(store_target, keys)
    client = client_for(store_target)
    assert client.get("/api/runs").json()["sealed"] is True
    check(client)


def test_a_database_without_queues_shows_none(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"

    async def main() -> None:
        store = zincir.open_store(path)
        await store.close()

    asyncio.run(main())
    client = client_for(str(path))
    assert client.get("/api/queues").json() == {
        "queues": [],
        "schedules": [],
        "runs_per_queue": 100,
    }
    assert "No queues in this database" in client.get("/queues").text
