"""LangGraph's own checkpointer conformance suite (langgraph-checkpoint-conformance) against
AsyncZincirSaver on a real SQLite file (and on a PostgreSQL schema when $ZINCIR_TEST_BACKENDS
names postgres): every base and every extended capability passes.

The suite's report is printed, so it shows in the test log (``pytest -rA`` or ``-s``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="the conformance suite is in dev")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.checkpoint.conformance.report import ProgressCallbacks  # noqa: E402

from tests.conftest import BACKENDS  # noqa: E402
from zincir.integrations.langgraph import AsyncZincirSaver, ZincirSaver  # noqa: E402


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the saver's store lives: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "conformance.db")


async def test_async_saver_passes_every_base_and_extended_capability(db: str) -> None:
    @checkpointer_test(name="AsyncZincirSaver")
    async def factory() -> AsyncIterator[AsyncZincirSaver]:
        async with AsyncZincirSaver.from_conn_string(db) as saver:
            yield saver

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()
    for name, result in report.results.items():
        print(f"  {name}: {result.tests_passed} passed, {result.tests_failed} failed")
        for failure in result.failures:
            print(f"    {failure}")

    assert report.passed_all_base()
    for capability in sorted(BASE_CAPABILITIES | EXTENDED_CAPABILITIES):
        result = report.results[capability.value]
        assert result.detected, f"{capability.value} was not detected"
        assert result.passed is True and result.tests_passed > 0, result.failures
    assert report.conformance_level() == "FULL"


async def test_sync_saver_passes_the_same_suite_through_its_async_methods(db: str) -> None:
    """ZincirSaver shares the async methods; the suite finds the same full conformance."""

    @checkpointer_test(name="ZincirSaver")
    async def factory() -> AsyncIterator[ZincirSaver]:
        with ZincirSaver.from_conn_string(db) as saver:
            yield saver

    report = await validate(factory)
    report.print_report()
    assert report.conformance_level() == "FULL", report.to_dict()
