"""The claim race at short counts, on each backend: no double grant, tokens in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability import claim_race
from tests.conftest import BACKENDS
from tests.helpers import backend_target

pytestmark = pytest.mark.crash


@pytest.fixture(params=BACKENDS)
def race_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the racers share: a SQLite file or a PostgreSQL schema."""
    return backend_target(request, tmp_path)


def test_racing_claimers_never_share_a_run(race_target: str) -> None:
    report = claim_race.race(race_target, claim_race.PROCESSES[True], claim_race.ROUNDS[True])
    assert report.ok, report.failures()
