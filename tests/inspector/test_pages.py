"""The inspector's pages and JSON API over a database seeded through AgentContext."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import client_for, seed
from tests.inspector.seed import Seeded
from zincir.inspector._app import EVENT_TEXT, event_url, run_url

Fixture = tuple[Path, Seeded]


def test_run_list_shows_every_run_with_full_id(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    for run_id in runs.all:
        assert f'href="{run_url(run_id)}"' in page.text
    for plain_id in (runs.completed, runs.in_doubt, runs.failed, runs.parent, runs.child):
        assert plain_id in page.text  # full ids, not abbreviated
    for text in ("research-agent", "support-agent", "crawler", "anthropic", "openai"):
        assert text in page.text
    assert "held by" in page.text  # the in-doubt run's live lease
    assert page.text.count('class="badge status-completed"') == 2
    assert page.text.count('class="badge status-failed"') == 2


def test_status_filter(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    failed = client.get("/?status=failed").text
    assert "crawler" in failed and f'href="{run_url(runs.xss)}"' in failed
    assert "research-agent" not in failed and "support-agent" not in failed
    assert 'class="active status-failed"' in failed
    running = client.get("/api/runs", params={"status": "running"}).json()
    assert {run["id"] for run in running["runs"]} == {runs.in_doubt, runs.parent}
    assert running["status"] == "running"
    assert client.get("/api/runs?status=nothing-like-this").json()["runs"] == []
    assert "No runs with status" in client.get("/?status=cancelled").text


def test_api_runs_json(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    body = client.get("/api/runs").json()
    assert body["limit"] == 100
    by_id = {run["id"]: run for run in body["runs"]}
    assert set(by_id) == set(runs.all)
    done = by_id[runs.completed]
    assert done["name"] == "research-agent" and done["status"] == "completed"
    assert done["provider"] == "anthropic" and done["event_count"] == 8
    assert done["lease_state"] == "none" and done["lease"]["state"] == "none"
    held = by_id[runs.in_doubt]
    assert held["lease_state"] == "held" and held["lease"]["owner"]
    assert held["lease"]["expires_at"] > held["updated_at"]
    assert by_id[runs.child]["parent_id"] == runs.parent
    assert {"created_at", "updated_at", "url"} <= done.keys()
    assert "config" not in done  # the list stays small; the run API carries config
    times = [run["updated_at"] for run in body["runs"]]
    assert times == sorted(times, reverse=True)


def test_run_page_shows_config_events_checkpoint_and_usage(
    client: TestClient, seeded: Fixture
) -> None:
    _, runs = seeded
    page = client.get(run_url(runs.completed))
    assert page.status_code == 200
    text = page.text
    assert runs.completed in text
    assert "&#34;goal&#34;: &#34;Compare the proposals&#34;" in text  # pretty JSON config
    assert text.count("<details>") == 8  # every event collapsible
    for kind in (
        "llm_call",
        "tool_call",
        "tool_result",
        "checkpoint_proposed",
        "checkpoint_accepted",
        "state_transition",
    ):
        assert kind in text
    assert 'class="badge status-accepted"' in text
    assert "up to #5" in text  # lineage: the checkpoint summarises events up to seq 5
    assert "12 passed" in text  # verifier evidence
    assert "2,700" in text and "380" in text  # usage totals over both llm_calls
    assert "output/call_1.json" in text  # the run's result
    assert "pending · in doubt" not in text


def test_pending_intent_is_highlighted_in_doubt(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    text = client.get(run_url(runs.in_doubt)).text
    assert "Pending tool intents" in text and "in doubt" in text
    pending = re.findall(r'<li id="e(\d+)" class="event flag-pending">', text)
    assert pending == ["4"]  # mail-77 has no result; refund-77 (seq 3) has one
    assert 'class="badge status-rejected"' in text
    assert "first email bounced" in text
    detail = client.get(f"/api/runs/{runs.in_doubt}").json()
    assert [(t["id"], t["name"]) for t in detail["pending_tools"]] == [("mail-77", "send_email")]
    assert detail["run"]["lease"]["state"] == "held"


def test_parent_and_child_runs_link_each_other(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    parent = client.get(run_url(runs.parent)).text
    assert "Child runs" in parent and f'href="{run_url(runs.child)}"' in parent
    child = client.get(run_url(runs.child)).text
    assert f'href="{run_url(runs.parent)}"' in child
    detail = client.get(f"/api/runs/{runs.parent}").json()
    assert [c["id"] for c in detail["children"]] == [runs.child]
    assert client.get(f"/api/runs/{runs.child}").json()["parent"]["id"] == runs.parent


def test_api_run_detail(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    body = client.get(f"/api/runs/{runs.completed}").json()
    assert {
        "run",
        "config",
        "checkpoints",
        "pending_tools",
        "operations",
        "steps",
        "timers",
        "children",
        "usage",
        "events",
        "next_after_seq",
    } <= body.keys()
    assert body["config"] == {"goal": "Compare the proposals", "model": "claude", "max_rounds": 4}
    assert body["run"]["result"] == {"summary": "output/call_1.json"}
    assert body["usage"] == {"input_tokens": 2700, "output_tokens": 380}
    assert [e["seq"] for e in body["events"]] == list(range(1, 9))
    assert body["events"][1]["type"] == "llm_call"
    assert body["events"][1]["payload"]["tool_calls"][0]["name"] == "write_file"
    assert body["next_after_seq"] is None
    (checkpoint,) = body["checkpoints"]
    assert checkpoint["status"] == "accepted" and checkpoint["lineage_seq"] == 5
    assert checkpoint["evidence"] == {"checked": ["write summary"], "tests": "12 passed"}
    assert checkpoint["state"]["artifacts"] == ["output/call_1.json"]
    assert body["pending_tools"] == [] and body["children"] == []
    failed = client.get(f"/api/runs/{runs.failed}").json()["run"]
    assert failed["status"] == "failed" and "RateLimited" in failed["last_error"]


def test_unknown_run_is_404_page_and_json(client: TestClient) -> None:
    page = client.get("/runs/no-such-run")
    assert page.status_code == 404 and "Run not found" in page.text
    assert page.headers["content-type"].startswith("text/html")
    api = client.get("/api/runs/no-such-run")
    assert api.status_code == 404 and api.json()["error"] == "Run not found"
    assert client.get("/nowhere").status_code == 404
    assert client.get("/api/nowhere").json()["status"] == 404


def test_run_ids_with_reserved_characters_round_trip(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    assert "/" in runs.xss and "?" in runs.xss and "#" in runs.xss
    page = client.get(run_url(runs.xss))
    assert page.status_code == 200
    assert client.get("/api/runs/" + run_url(runs.xss)[6:]).json()["run"]["id"] == runs.xss


def test_bad_page_parameters_are_400(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    for query in ("page=-1", "page=abc", "after_seq=1e3", "after_seq=" + "9" * 30):
        response = client.get(f"{run_url(runs.completed)}?{query}")
        assert response.status_code == 400, query
        assert "non-negative integer" in response.text
    beyond = client.get(f"{run_url(runs.completed)}?page=99")
    assert beyond.status_code == 200 and "no events here" in beyond.text


def test_head_is_served_like_get(client: TestClient) -> None:
    response = client.head("/")
    assert response.status_code == 200 and response.content == b""


def test_static_assets_come_from_the_package(client: TestClient) -> None:
    css = client.get("/static/inspector.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    script = client.get("/static/local-time.js")
    assert script.status_code == 200 and "textContent" in script.text
    assert "innerHTML" not in script.text
    page = client.get("/").text
    assert "http://" not in page and "https://" not in page  # no external assets


def test_schema_newer_than_the_code_is_a_readable_409(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "future.db"
    from zincir.store.sqlite import _base

    known = _base.migrations()
    future = (known[-1][0] + 1, "from_the_future", "CREATE TABLE future_table (x INTEGER);")
    with monkeypatch.context() as patch:  # a newer zincir: one more packaged migration
        patch.setattr(_base, "migrations", lambda: [*known, future])

        async def one_run(store: zincir.SQLiteStore) -> None:
            ctx = await zincir.AgentContext.create(store, name="from-the-future")
            await ctx.complete()

        seed(path, one_run)
    client = client_for(path)
    page = client.get("/")
    assert page.status_code == 409
    assert "newer than this zincir" in page.text and "upgrade zincir" in page.text
    assert "Traceback" not in page.text
    api = client.get("/api/runs")
    assert api.status_code == 409 and "newer" in api.json()["message"]


async def test_usage_totals_follow_new_events(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    store = zincir.open_store(path)
    try:
        ctx = await zincir.AgentContext.create(store, name="growing")
        await ctx.record_response("a", [], "end_turn", usage={"input_tokens": 5})
        client = client_for(path)
        assert client.get(f"/api/runs/{ctx.run_id}").json()["usage"] == {"input_tokens": 5}
        await ctx.record_response(
            "b", [], "end_turn", usage={"input_tokens": 7, "output_tokens": 2, "note": "x"}
        )
        await ctx.record_response("c", [], "end_turn")
        body = client.get(f"/api/runs/{ctx.run_id}").json()
        assert body["usage"] == {"input_tokens": 12, "output_tokens": 2}
        assert body["run"]["event_count"] == 4
        await ctx.complete()
    finally:
        await store.close()


def test_a_huge_event_is_cut_on_the_page_not_in_the_api(tmp_path: Path) -> None:
    path = tmp_path / "zincir.db"
    text = "x" * 300_000

    async def huge(store: zincir.SQLiteStore) -> str:
        ctx = await zincir.AgentContext.create(store, name="verbose")
        await ctx.record_response(text, [], "end_turn")
        await ctx.complete()
        return ctx.run_id

    run_id = seed(path, huge)
    client = client_for(path)
    page = client.get(run_url(run_id)).text
    assert f"cut at {EVENT_TEXT:,} of" in page and len(page) < 200_000
    assert f'data-src="{event_url(run_id, 2)}"' in page  # opening it loads it whole
    assert client.get(event_url(run_id, 2)).json()["value"]["content"] == text
    assert client.get(f"/api/runs/{run_id}").json()["events"][1]["payload"]["content"] == text
