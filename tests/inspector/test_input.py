"""Hostile ?page= and ?after_seq= values: 200 or 400, never a 500.

``str.isdigit`` accepts ``²`` and other scripts' digits that ``int`` refuses (or reads),
and a page number times the page size can pass the 64-bit range SQLite binds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.inspector.seed import Seeded
from zincir.inspector._app import run_url

Fixture = tuple[Path, Seeded]

NOT_ASCII_DIGITS = ["²", "¹", "٣", "𝟗", "۱۲", "1²", "١٠٠"]


@pytest.mark.parametrize("name", ["page", "after_seq"])
@pytest.mark.parametrize("value", NOT_ASCII_DIGITS)
def test_digits_outside_ascii_are_400(
    client: TestClient, seeded: Fixture, name: str, value: str
) -> None:
    _, runs = seeded
    for path in (run_url(runs.completed), f"/api/runs/{runs.completed}"):
        response = client.get(path, params={name: value})
        assert response.status_code == 400, (path, name, value)
        assert "non-negative integer" in response.text


@pytest.mark.parametrize(
    "query",
    [
        "page=99999999999999999",
        "page=999999999999999999",
        "page=46116860184273880",
        "after_seq=999999999999999999",
        "page=2",
        "after_seq=8",
    ],
)
def test_a_page_past_the_end_is_an_empty_page(
    client: TestClient, seeded: Fixture, query: str
) -> None:
    _, runs = seeded
    page = client.get(f"{run_url(runs.completed)}?{query}")
    assert page.status_code == 200, query
    assert "no events here" in page.text and "Internal error" not in page.text
    api = client.get(f"/api/runs/{runs.completed}?{query}")
    assert api.status_code == 200, query
    body = api.json()
    assert body["events"] == [] and body["next_after_seq"] is None
    assert body["run"]["id"] == runs.completed


def test_page_zero_and_one_are_the_first_page(client: TestClient, seeded: Fixture) -> None:
    _, runs = seeded
    for query in ("page=0", "page=1", "page=00001", "after_seq=0", ""):
        body = client.get(f"/api/runs/{runs.completed}?{query}").json()
        assert [event["seq"] for event in body["events"]] == list(range(1, 9)), query
