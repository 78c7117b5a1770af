"""The built documentation site and a local HTTP server for it, once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.site import built_site, serve


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A current build of the documentation site (see tests/docs/site.py)."""
    return built_site(tmp_path_factory)


@pytest.fixture(scope="session")
def site_server(site: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """The site served on a free loopback port: its base URL and the requests answered."""
    with serve(site) as served:
        yield served
