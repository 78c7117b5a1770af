"""Every ```python block of the README runs as written, in a fresh folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
