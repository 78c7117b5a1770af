"""Steps, timers, messages, child runs and operations, seeded through WorkflowContext and
LocalRuntime (skipped, with the reason, while those modules are missing)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.inspector.conftest import client_for, seed
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import (
    DUE_TIMER_RUN,
    OPERATIONS_RUN,
    WORKFLOW_RUN,
    seed_due_timer,
    seed_operations,
    seed_workflow,
)
from zincir import SQLiteStore
from zincir.inspector._app import run_url


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    path: Path = tmp_path_factory.mktemp("workflow") / "zincir.db"

    async def fill(store: SQLiteStore) -> tuple[str | None, str | None]:
        return await seed_workflow(store), await seed_operations(store)

    workflow, operations = seed(path, fill)
    if workflow is None:
        pytest.skip("zincir.workflow (WorkflowContext) is not importable yet")
    if operations is None:
        pytest.skip("zincir.durable.LocalRuntime is not importable yet")
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    seed(path, seed_due_timer, clock=lambda: an_hour_ago)
    return client_for(path)


def section(html: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}".*?</section>', html, re.S)
    assert match, anchor
    return match.group(0)


def test_steps_with_results(client: TestClient) -> None:
    steps = section(client.get(run_url(WORKFLOW_RUN)).text, "steps")
    assert "fetch-data" in steps and "generate-report" in steps
    assert steps.count('class="badge status-completed"') == 2
    assert "report.md" in steps and "&#34;rows&#34;: 3" in steps
    body = client.get(f"/api/runs/{WORKFLOW_RUN}").json()
    assert [(s["name"], s["status"]) for s in body["steps"]] == [
        ("fetch-data", "completed"),
        ("generate-report", "completed"),
    ]
    assert body["steps"][1]["result"] == "report.md"


def test_timers_completed_waiting_and_due(client: TestClient) -> None:
    page = client.get(run_url(WORKFLOW_RUN)).text
    timers = section(page, "timers")
    assert 'class="badge timer-completed">completed' in timers
    assert 'class="badge timer-waiting">waiting' in timers and "in 5 h" in timers
    assert "Waiting on" in page and "nightly-retry" in page
    body = client.get(f"/api/runs/{WORKFLOW_RUN}").json()
    assert {t["name"]: t["state"] for t in body["timers"]} == {
        "cool-down": "completed",
        "nightly-retry": "waiting",
    }
    assert body["run"]["wait_kind"] == "timer"
    due = client.get(f"/api/runs/{DUE_TIMER_RUN}").json()
    assert [(t["name"], t["state"]) for t in due["timers"]] == [("backoff", "due")]
    assert 'class="badge timer-due">due' in client.get(run_url(DUE_TIMER_RUN)).text


def test_messages_and_child_runs(client: TestClient) -> None:
    page = client.get(run_url(WORKFLOW_RUN)).text
    body = client.get(f"/api/runs/{WORKFLOW_RUN}").json()
    (child,) = body["children"]
    assert child["name"] == "summariser" and child["spawn_name"] == "summarise"
    assert f'href="{run_url(child["id"])}"' in section(page, "children")
    messages = section(page, "messages")
    assert {m["topic"] for m in body["messages"]} == {"self-note", "instructions", "approval"}
    assert "external" in messages  # the approval came from outside any run
    assert f'href="{run_url(child["id"])}"' in messages
    child_page = client.get(run_url(child["id"])).text
    assert f'href="{run_url(WORKFLOW_RUN)}"' in child_page  # back to the parent
    assert "instructions" in child_page


def test_operations_with_outcomes(client: TestClient) -> None:
    page = client.get(run_url(OPERATIONS_RUN)).text
    ops = section(page, "operations")
    for outcome in ("success", "failure", "suspended"):
        assert f'class="badge outcome-{outcome}">{outcome}' in ops
    assert "RateLimited" in ops and "approval" in ops and "support-tools" in ops
    body = client.get(f"/api/runs/{OPERATIONS_RUN}").json()
    outcomes = [(o["sequence"], o["kind"], o["outcome"]) for o in body["operations"]]
    assert outcomes == [
        (0, "tool_call", "success"),
        (1, "tool_call", "failure"),
        (2, "tool_call", "suspended"),
    ]
    assert body["operations"][0]["outcome_detail"]["output_json"]["ok"] is True
    assert body["operations"][1]["outcome_detail"]["error"] == "RateLimited"
    assert body["operations"][2]["outcome_detail"]["reason"] == "approval"


def test_workflow_pages_are_inert(client: TestClient) -> None:
    for path in ("/", run_url(WORKFLOW_RUN), run_url(OPERATIONS_RUN), run_url(DUE_TIMER_RUN)):
        assert_inert(client.get(path).text)
