"""Fixtures for the integration tests; the Temporal server starts only when a test asks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.temporal_server import TemporalServer, temporal_server_session


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """A real Temporal dev server on 127.0.0.1, shared by the whole session."""
    yield from temporal_server_session()
