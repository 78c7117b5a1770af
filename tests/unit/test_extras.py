"""The extras install what their integrations import."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def extra(name: str) -> set[str]:
    """The distribution names an extra lists, without versions or extras."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    listed = project["optional-dependencies"][name]
    return {re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0] for requirement in listed}


def test_the_langgraph_extra_installs_langgraph_itself() -> None:
    assert {"langgraph", "langgraph-checkpoint"} <= extra("langgraph")


def test_every_extra_pins_a_lowest_version() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    for name, listed in project["optional-dependencies"].items():
        if name != "dev":
            assert all(re.search(r"[<>=~]=?\d", item) for item in listed), name
