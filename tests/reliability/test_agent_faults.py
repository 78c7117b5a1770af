"""Agent faults at short counts: every ordinary fault met by a durable agent run on default
settings is survived, no finished model request is asked again, and a restart after
SIGKILL does not wait for the dead owner's lease."""

from __future__ import annotations

import pytest

from reliability import agent_faults

pytestmark = pytest.mark.crash


def test_durable_agent_runs_survive_ordinary_faults_on_default_settings() -> None:
    report = agent_faults.run(short=True)
    assert report.ok, report.failures() + report.notes
