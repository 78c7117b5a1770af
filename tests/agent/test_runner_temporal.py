"""A Runner on a TemporalRuntime: a Temporal worker serves ``runner.registry``, built with the
handler ids of ``Runner.handlers_for``."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import lines
from tests.agent.runner_agents import HANG_ENV, LOG_ENV, agent
from tests.helpers import rows
from tests.integration.temporal_server import TemporalServer
from zincir.agent import Runner

try:
    from temporalio.client import Client

    from zincir.temporal import TemporalRuntime, Worker
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.temporal

PROMPT = "Weather for Oslo, through Temporal."


async def test_a_runner_on_a_temporal_runtime(
    temporal_server: TemporalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    monkeypatch.delenv(HANG_ENV, raising=False)
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
    queue = f"runner-{uuid.uuid4().hex}"
    db = tmp_path / "x.db"
    store = zincir.open_store(db)
    try:
        runtime = TemporalRuntime(
            client,
            task_queue=queue,
            registrations=Runner.handlers_for(agent).configured(),
            record_store=store,
        )
        runner = Runner(store, [agent], runtime=runtime)
        async with Worker(client, runner.registry, queue):
            result = await runner.run(agent, PROMPT)
            assert result.output == f"{PROMPT} -> Oslo clear" and result.run_id is not None
            again = await runner.run(agent, PROMPT, run_id=result.run_id)
            assert again.output == result.output
            assert (await runner.resume(result.run_id)).output == result.output
        assert lines(log) == ["model 0", "tool lookup Oslo", "model 1"]
        [(config,)] = rows(db, "SELECT config FROM agent_runs")
        assert json.loads(config)["prompt"] == PROMPT
    finally:
        await store.close()
