"""Every code block of the README and of the documentation site runs as written, twice.

A ```python block runs twice in a row in a fresh folder (the second run finds what the first
stored, as a restarted program would); any other block, and a python block that cannot run
alone, carries ``<!-- excerpt: why -->`` on the line before its fence. A block that is only
``--8<-- "path"`` shows that file of the repository (pymdownx.snippets) and runs that file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent.openai_server import API_KEY, Reply, chat_server, completion, tool_call
from tests.conftest import REPO

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
EXCERPT = re.compile(r"<!--\s*excerpt:\s*(?P<why>\S.*?)\s*-->")
SNIPPET = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"\s*$')


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it is, its language, its code and why it may not run."""

    page: str
    number: int
    language: str
    code: str
    excerpt: str | None

    @property
    def runs(self) -> bool:
        return self.language in {"python", "py"} and self.excerpt is None


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for number, match in enumerate(FENCE.finditer(text), start=1):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marked = EXCERPT.fullmatch(before.strip())
        indent = match["indent"]
        code = "".join(line.removeprefix(indent) for line in match["body"].splitlines(True))
        snippet = SNIPPET.match(code.strip())
        if snippet:
            code = (REPO / snippet["path"]).read_text()
        found.append(
            Block(
                page=str(page.relative_to(REPO)),
                number=number,
                language=match["info"].strip().split(" ", 1)[0].lower(),
                code=code,
                excerpt=marked["why"] if marked else None,
            )
        )
    return found


BLOCKS = [block for page in pages() for block in blocks_of(page)]
RUNNABLE = [
    # A block importing zincir.temporal starts a Temporal dev server (`make test-quick` skips it).
    pytest.param(block, id=f"{block.page}#{block.number}", marks=pytest.mark.temporal)
    if "zincir.temporal" in block.code
    else pytest.param(block, id=f"{block.page}#{block.number}")
    for block in BLOCKS
    if block.runs
]


def test_every_block_runs_or_says_why_not() -> None:
    unmarked = [
        f"{b.page}#{b.number} ({b.language or 'no language'})"
        for b in BLOCKS
        if not b.runs and b.excerpt is None
    ]
    assert unmarked == [], "mark these <!-- excerpt: why --> or make them python that runs"
    assert len(RUNNABLE) >= 40  # the docs are mostly examples that run


def test_readme_first_agent_is_the_example_the_docs_include() -> None:
    """The README's first agent is examples/first_agent.py, word for word, so neither drifts."""
    first = next(block for block in BLOCKS if block.page == "README.md" and block.runs)
    assert first.code == (REPO / "examples" / "first_agent.py").read_text()


@pytest.mark.parametrize("block", RUNNABLE)
def test_block_runs_twice(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(block.code)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("ZINCIR_DATABASE_PATH", None)
    if "ZINCIR_POSTGRES_URL" in block.code:  # a block for PostgreSQL gets a fresh schema
        env["ZINCIR_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    if "OPENAI_BASE_URL" in block.code:  # the first agent talks to a scripted server
        _weather_twice(script, tmp_path, env)
        return
    for attempt in ("first", "second"):
        result = _run(script, tmp_path, env)
        assert result.returncode == 0, (
            f"{attempt} run of {block.page}#{block.number}:\n{result.stderr}"
        )


WEATHER_SCRIPT = [
    Reply(body=completion(None, [tool_call("call_1", "get_weather", '{"city": "Oslo"}')])),
    Reply(body=completion("Oslo: light rain, 14 °C.")),
]
"""What the scripted server answers one run of the first agent."""


def _weather_twice(script: Path, cwd: Path, env: dict[str, str]) -> None:
    """The first agent, run twice: each run is a new one, asks the model, calls the tool."""
    with chat_server() as server:
        server.script(*WEATHER_SCRIPT, *WEATHER_SCRIPT)
        env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"] = server.base_url, API_KEY
        run_ids = []
        for request in (1, 3):
            result = _run(script, cwd, env)
            assert result.returncode == 0, result.stderr
            # the run's answer is printed after its new id, and the tool's result reached the model
            run_id, _, output = result.stdout.strip().partition(" ")
            assert run_id.startswith("weather-") and output == "Oslo: light rain, 14 °C."
            assert "light rain" in json.dumps(server.bodies[request]["messages"][-1])
            run_ids.append(run_id)
        assert run_ids[0] != run_ids[1]


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
