"""Recovery latency at short counts: a killed owner's run resumed within the poll interval."""

from __future__ import annotations

import pytest

from reliability import recovery_latency

pytestmark = pytest.mark.crash


def test_a_killed_owners_run_is_resumed_within_the_poll_interval() -> None:
    report = recovery_latency.run(short=True)
    assert report.ok, report.failures()
