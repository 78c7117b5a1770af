"""The layering the store redesign set: SQL and the database driver live only in store/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "zincir"
STORE = PACKAGE / "store"
SQL = re.compile(  # statements are written in upper case; prose is not
    r"\b(SELECT\s+\S.*\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE"
    r"|PRAGMA\s+[a-z_]+\s*=)",
    re.DOTALL,
)
DRIVERS = {"apsw", "psycopg", "psycopg_pool", "sqlite3"}


def drivers_imported(path: Path) -> list[str]:
    """The database drivers the module at ``path`` imports (absolute imports only)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    return [name for name in names if name in DRIVERS]


def _outside_store() -> list[Path]:
    return [path for path in PACKAGE.rglob("*.py") if STORE not in path.parents]


def test_no_module_outside_store_imports_a_database_driver() -> None:
    found = []
    for path in _outside_store():
        found += [f"{path.relative_to(PACKAGE)}: {name}" for name in drivers_imported(path)]
    assert found == []


def test_no_module_outside_store_holds_an_sql_statement() -> None:
    found = []
    for path in _outside_store():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and SQL.search(node.value)
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def test_the_event_log_has_one_writer() -> None:
    """One writer per backend (the fenced append), and the log's shared module, which
    copies a fork's history before its fork point (``store._log.copy_log_prefix``)."""
    writers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"INSERT\s+INTO\s+events\b", path.read_text("utf-8"), re.IGNORECASE)
    )
    assert writers == ["store/_log.py", "store/postgres/_log.py", "store/sqlite/_log.py"]


def test_runs_are_created_in_one_place() -> None:
    """One place for every backend (``store._log.insert_run``)."""
    creators = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"INSERT\s+INTO\s+agent_runs\b", path.read_text("utf-8"), re.IGNORECASE)
    )
    assert creators == ["store/_log.py"]
