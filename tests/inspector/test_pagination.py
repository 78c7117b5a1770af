"""Keyset pagination over a 100,000-event run seeded through record_response."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.inspector.conftest import BIG_RUN_EVENTS, client_for
from zincir.inspector._app import run_url

PAGE = 200


@pytest.fixture(scope="module")
def big(big_run: tuple[Path, str]) -> tuple[TestClient, str]:
    path, run_id = big_run
    return client_for(path), run_id


def seqs_on(html: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<li id="e(\d+)" class="event', html)]


def test_first_page(big: tuple[TestClient, str]) -> None:
    client, run_id = big
    page = client.get(run_url(run_id))
    assert page.status_code == 200
    assert seqs_on(page.text) == list(range(1, PAGE + 1))
    assert "#1–#200 of 100,000 · page 1 of 500" in page.text
    assert f'href="{run_url(run_id)}?after_seq=200">next' in page.text
    assert f'href="{run_url(run_id)}?after_seq=99800">last' in page.text
    assert "previous" not in page.text
    assert "299,994" in page.text  # usage: 99,998 llm_calls × 3 output tokens


def test_deep_pages_by_number_and_by_cursor(big: tuple[TestClient, str]) -> None:
    client, run_id = big
    deep = client.get(f"{run_url(run_id)}?page=400")
    assert seqs_on(deep.text) == list(range(79_801, 80_001))
    assert "page 400 of 500" in deep.text
    assert f'href="{run_url(run_id)}?after_seq=79600">' in deep.text  # previous
    last = client.get(f"{run_url(run_id)}?after_seq=99990")
    assert seqs_on(last.text) == list(range(99_991, 100_001))
    assert "next ›" not in last.text
    odd = client.get(f"{run_url(run_id)}?after_seq=12345")
    assert seqs_on(odd.text) == list(range(12_346, 12_546))


def test_api_pages_with_next_cursor(big: tuple[TestClient, str]) -> None:
    client, run_id = big
    first = client.get(f"/api/runs/{run_id}").json()
    assert first["run"]["event_count"] == BIG_RUN_EVENTS
    assert [e["seq"] for e in first["events"]] == list(range(1, PAGE + 1))
    assert first["next_after_seq"] == PAGE
    assert first["usage"] == {"input_tokens": 999_980, "output_tokens": 299_994}
    cursor = 99_800
    tail = client.get(f"/api/runs/{run_id}", params={"after_seq": cursor}).json()
    assert [e["seq"] for e in tail["events"]] == list(range(99_801, 100_001))
    assert tail["next_after_seq"] is None
    assert tail["events"][-1]["payload"]["to"] == "completed"


def test_big_run_in_the_list(big: tuple[TestClient, str]) -> None:
    client, run_id = big
    (run,) = client.get("/api/runs").json()["runs"]
    assert run["id"] == run_id and run["event_count"] == BIG_RUN_EVENTS
    assert "100,000" in client.get("/").text
