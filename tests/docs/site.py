"""The built documentation site for tests, and a local HTTP server for it.

``make test`` builds the site into ``site/`` (``make docs``) before the tests run, so the
tests read that build. When ``site/`` is missing or older than what it is built from (the
``make test-quick`` loop, or a page edited since), the site is built once per test session
into a temporary folder instead: under pytest-xdist the workers share one build, made by
the first worker to take a file lock and reused by the others.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"

# What a build reads: the pages, the configuration, the docstrings of the API reference, and
# the repository files the pages include (``--8<--``: examples, RELIABILITY.md).
SOURCES = [
    (ROOT / "docs", "*"),
    (ROOT / "mkdocs.yml", ""),
    (ROOT / "src" / "zincir", "*.py"),
    (ROOT / "examples", "*.py"),
    (ROOT / "RELIABILITY.md", ""),
]
# The files a finished build always writes.
BUILT = ("index.html", "objects.inv", "search/search_index.json")


def newest_source() -> float:
    """The modification time of the newest file the site is built from."""
    newest = 0.0
    for source, pattern in SOURCES:
        files = source.rglob(pattern) if pattern else [source]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                newest = max(newest, path.stat().st_mtime)
    return newest


def is_current(site: Path) -> bool:
    """Whether ``site`` holds a whole build newer than every file it is built from."""
    built = [site / name for name in BUILT]
    if not all(path.is_file() for path in built):
        return False
    return min(path.stat().st_mtime for path in built) >= newest_source()


def build(site: Path) -> None:
    """``mkdocs build --strict`` into ``site``: a page, link or reference that does not
    resolve fails the build, and with it the test that asked for the site."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build failed:\n{done.stdout}{done.stderr}")


_session_site: Path | None = None


def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a current build of the site: ``site/`` when it is current, else one
    build for the whole session (shared by its xdist workers)."""
    global _session_site
    if _session_site is not None:
        return _session_site
    if is_current(SITE):
        _session_site = SITE
        return SITE
    if not can_build():
        pytest.skip(
            "site/ is missing or stale and the docs extra is not installed "
            "(`make docs` builds the site)"
        )
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    site, failed = base / "docs-site", base / "docs-site.failed"
    with (base / "docs-site.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker builds; the others wait for it
        if failed.is_file():
            raise RuntimeError(failed.read_text())
        if not all((site / name).is_file() for name in BUILT):
            try:
                build(site)
            except RuntimeError as error:
                failed.write_text(str(error))
                raise
    _session_site = site
    return site


def can_build() -> bool:
    import importlib.util

    return (
        importlib.util.find_spec("mkdocs") is not None
        and importlib.util.find_spec("mkdocstrings_handlers.python") is not None
    )


class _Handler(SimpleHTTPRequestHandler):
    """Serves the site's files and records each request's path and status, quietly; nothing
    is cached, so every page a test opens asks again for each file it needs."""

    served: list[tuple[str, int]]

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        self.served.append((self.path, int(code)))

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    """A browser that leaves a page drops its connections; that is no error of the site."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(folder: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """``folder`` over HTTP on a free loopback port, from a thread: the base URL (ending in
    ``/``) and the list of (path, status) of every request answered so far."""
    served: list[tuple[str, int]] = []
    handler = type("Handler", (_Handler,), {"served": served})
    server = _QuietServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
