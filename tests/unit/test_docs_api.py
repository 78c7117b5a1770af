"""The API reference names every export: each module's ``__all__`` is in the built site's inventory.

The inventory is read from the built site (tests/docs/site.py: ``site/`` as ``make docs``
built it with ``--strict``, or one build for the session when ``site/`` is missing or stale);
mkdocstrings' ``objects.inv`` lists every object it rendered.
"""

from __future__ import annotations

import ast
import zlib
from pathlib import Path

import pytest

from tests.docs.site import built_site

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# The modules the API reference renders, each on its own page under docs/api/.
MODULES = [
    "zincir",
    "zincir.agent",
    "zincir.store",
    "zincir.contract",
    "zincir.payloads",
    "zincir.workflow",
    "zincir.restart",
    "zincir.streams",
    "zincir.mcp",
    "zincir.temporal",
    "zincir.integrations.pydantic_ai",
    "zincir.integrations.langgraph",
    "zincir.integrations.openai_agents",
]


def _module_file(module: str) -> Path:
    path = SRC.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def exported_names(module: str) -> list[str]:
    """``module.__all__`` read from its source, following ``from .x import __all__``."""
    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return list(ast.literal_eval(node.value))
        if isinstance(node, ast.ImportFrom) and any(a.name == "__all__" for a in node.names):
            base = module.split(".")  # the package a relative import starts from
            if _module_file(module).name != "__init__.py":
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            return exported_names(source)
    raise AssertionError(f"{module} has no __all__")


def read_inventory(path: Path) -> set[str]:
    """The object names in a Sphinx-format (version 2) inventory, as mkdocstrings writes it."""
    data = path.read_bytes()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2", header[0]
    lines = zlib.decompress(header[4]).decode("utf-8").splitlines()
    return {line.split(" ", 1)[0] for line in lines if line.strip()}


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The built site's inventory (skipped when there is no current build and the docs extra
    is not installed to make one)."""
    return read_inventory(built_site(tmp_path_factory) / "objects.inv")


@pytest.mark.parametrize("module", MODULES)
def test_every_export_is_in_the_api_reference(module: str, inventory: set[str]) -> None:
    names = exported_names(module)
    assert names, module
    missing = [name for name in names if f"{module}.{name}" not in inventory]
    assert not missing, f"{module} exports names the API reference does not render: {missing}"


def test_each_module_has_its_page() -> None:
    directives = {
        line.removeprefix(":::").strip()
        for page in (ROOT / "docs" / "api").rglob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith(":::")
    }
    assert set(MODULES) <= directives, sorted(set(MODULES) - directives)
