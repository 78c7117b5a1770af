"""Fixtures for the integration tests; the Temporal server starts only when a test asks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.temporal_server import TemporalServer, temporal_server_session


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``temporal`` every test that needs the dev server (`make test-quick` skips them)."""
    for item in items:
        if "temporal_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.temporal)


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """A real Temporal dev server on 127.0.0.1, shared by the whole session."""
    yield from temporal_server_session()
