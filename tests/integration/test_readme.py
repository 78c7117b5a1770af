"""Every ```python block of the README runs as written, in a fresh folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.openai_server import API_KEY, Reply, chat_server, completion, tool_call
from tests.conftest import REPO

BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
# A block that imports zincir.temporal starts a Temporal dev server (`make test-quick` skips it).
INDEXES = [
    pytest.param(index, marks=pytest.mark.temporal) if "zincir.temporal" in block else index
    for index, block in enumerate(BLOCKS)
]


@pytest.mark.parametrize("index", INDEXES)
def test_readme_block_runs(index: int, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(BLOCKS[index])
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("ZINCIR_DATABASE_PATH", None)
    if "ZINCIR_POSTGRES_URL" in BLOCKS[index]:  # a block for PostgreSQL gets a fresh schema
        env["ZINCIR_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    if "OPENAI_BASE_URL" in BLOCKS[index]:  # the first agent talks to a scripted server
        with chat_server() as server:
            server.script(*WEATHER_SCRIPT)
            env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"] = server.base_url, API_KEY
            result = _run(script, tmp_path, env)
        assert result.returncode == 0, result.stderr
        # the run's answer is printed after its new id, and the tool's result reached the model
        run_id, _, output = result.stdout.strip().partition(" ")
        assert run_id.startswith("weather-") and output == "Oslo: light rain, 14 °C."
        assert "light rain" in json.dumps(server.bodies[1]["messages"][-1])
        return
    result = _run(script, tmp_path, env)
    assert result.returncode == 0, result.stderr


WEATHER_SCRIPT = [
    Reply(body=completion(None, [tool_call("call_1", "get_weather", '{"city": "Oslo"}')])),
    Reply(body=completion("Oslo: light rain, 14 °C.")),
]
"""What the scripted server answers the README's first agent."""


def _run(script: Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
