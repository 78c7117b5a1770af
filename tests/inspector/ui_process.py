"""`zincir ui` in its own process, for the browser tests and the reliability suite."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.postgres_server import free_port

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def ui_server(db: Path, log_dir: Path) -> Iterator[str]:
    """``zincir ui --db DB`` on a free loopback port; yields its base URL (RuntimeError if it
    does not answer within 30 s, with its log)."""
    port = free_port()
    log = log_dir / "ui.log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ZINCIR_UI_ADDRESS": f"127.0.0.1:{port}"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from zincir.inspector import ui_command; ui_command()",
                "--db",
                str(db),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"zincir ui did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
