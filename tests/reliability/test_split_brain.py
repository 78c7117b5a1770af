"""Split brain at short counts: paused owners are fenced, starved loops start no late work."""

from __future__ import annotations

import pytest

from reliability import split_brain

pytestmark = pytest.mark.crash


def test_a_paused_owner_stores_nothing_after_a_takeover_and_stops() -> None:
    report = split_brain.paused_owners(short=True)
    assert report.ok, report.failures()


def test_a_starved_owner_whose_run_was_taken_over_starts_no_work() -> None:
    report = split_brain.starved_loop(taken_over=True)
    assert report.ok, report.failures()


def test_a_starved_owner_starts_no_work_after_its_lease_deadline() -> None:
    report = split_brain.starved_loop(taken_over=False)
    assert report.ok, report.failures()
