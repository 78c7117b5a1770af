"""Fixtures for the MCP tests: real servers of ``tests.durable_mcp.server`` over stdio and
streamable HTTP, a worker on the store, and a counting ``Connect`` that shows whether
anything connected."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO

pytest.importorskip("mcp")

from zincir.agent import DurableBinding, Handlers  # noqa: E402
from zincir.mcp import Connect, Target, serve_mcp, stdio, streamable_http  # noqa: E402
from zincir.payloads import McpRequest  # noqa: E402

HANDLER = "test-mcp"
HANDLERS = Handlers(mcp_request=HANDLER, event_delivery="test-events")


def server_env(ledger: Path, delays: Path | None = None) -> dict[str, str]:
    """The environment a test server runs in: it finds ``tests`` and writes ``ledger``."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        "ZINCIR_MCP_LEDGER": str(ledger),
    }
    if delays is not None:
        env["ZINCIR_MCP_DELAYS"] = str(delays)
    return env


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text("utf-8").splitlines() if ledger.exists() else []


@dataclass
class Counting:
    """A ``Connect`` that counts the sessions it opens (a replay must open none)."""

    inner: Connect
    opened: list[str] = field(default_factory=list)

    def __call__(self, request: McpRequest) -> Target:
        self.opened.append(request.method)
        return self.inner(request)


@dataclass
class HttpServer:
    """A test server speaking streamable HTTP on a loopback port, in its own process."""

    process: subprocess.Popen[str]
    url: str

    def stop(self) -> None:
        """Kill it: what it was doing does not matter, and nothing waits on a slow exit."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_http_server(ledger: Path, delays: Path | None = None) -> HttpServer:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.durable_mcp.server", "--http"],
        cwd=REPO,
        env=server_env(ledger, delays),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # "PORT n" once the socket listens
    if not line.startswith("PORT "):
        process.kill()
        process.wait(10)
        process.stdout.close()
        raise RuntimeError(f"the MCP test server did not start: {line!r}")
    return HttpServer(process, f"http://127.0.0.1:{int(line.split()[1])}/mcp")


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def http_server(ledger: Path) -> Iterator[HttpServer]:
    server = start_http_server(ledger)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stdio_connect(ledger: Path) -> Connect:
    return stdio(
        sys.executable, ["-m", "tests.durable_mcp.server"], env=server_env(ledger), cwd=REPO
    )


@pytest.fixture
def http_connect(http_server: HttpServer) -> Connect:
    return streamable_http(http_server.url)


@dataclass
class Worker:
    """A store, a registry with the MCP handler served by ``connect``, and bindings on it."""

    store: zincir.SQLiteStore
    db: Path
    registry: zincir.HandlerRegistry
    runtime: zincir.LocalRuntime

    def binding(self, run_id: str = "mcp-run", handlers: Handlers = HANDLERS) -> DurableBinding:
        return DurableBinding(self.runtime, run_id, handlers)


def worker(
    store: zincir.SQLiteStore,
    db: Path,
    connect: Connect,
    *,
    timeout: float = 20,
    retry: zincir.RetryPolicy | None = None,
    claim_ttl: float = 30,
) -> Worker:
    """A worker on ``store`` whose ``mcp_request`` handler reaches the server via ``connect``."""
    registry = zincir.HandlerRegistry()
    serve_mcp(registry, HANDLER, connect, timeout=timeout)
    runtime = zincir.LocalRuntime(
        store, registry, retry or zincir.RetryPolicy.no_retry(), claim_ttl=claim_ttl
    )
    return Worker(store, db, registry, runtime)
