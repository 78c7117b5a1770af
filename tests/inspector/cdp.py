"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
open a page, run a script in it, wait for what it shows. No driver library: the protocol's
JSON messages, NUL-separated, on the browser's fds 3 (in) and 4 (out)."""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HIGH_FD = 20  # the pipe ends are moved above the fds bash redirects (3 and 4)


class Browser:
    """One headless Chromium with one page attached."""

    def __init__(self, process: subprocess.Popen[bytes], send_fd: int, receive_fd: int) -> None:
        self.process = process
        self._send = send_fd
        self._receive = receive_fd
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._receive], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._receive, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        found: dict[str, Any] = json.loads(message)
        return found

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when a promise)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Evaluate ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"never true in {timeout} s: {expression}")
            time.sleep(0.05)

    def open(self, url: str) -> None:
        """Load ``url`` in the page and wait until it is complete."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}")


@contextmanager
def chromium_page(browser: str, profile: Path) -> Iterator[Browser]:
    """A headless Chromium with one blank page attached; killed on exit."""
    to_browser, from_browser = os.pipe(), os.pipe()
    child_in = fcntl.fcntl(to_browser[0], fcntl.F_DUPFD, HIGH_FD)
    child_out = fcntl.fcntl(from_browser[1], fcntl.F_DUPFD, HIGH_FD)
    os.close(to_browser[0])
    os.close(from_browser[1])
    args = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    process = subprocess.Popen(
        ["bash", "-c", f'exec "$@" 3<&{child_in} 4>&{child_out} {child_in}<&- {child_out}>&-']
        + ["bash", *args],
        pass_fds=(child_in, child_out),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(child_in)
    os.close(child_out)
    page = Browser(process, to_browser[1], from_browser[0])
    try:
        target = page.call("Target.createTarget", url="about:blank")["targetId"]
        page.session = page.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        page.call("Page.enable")
        page.call("Runtime.enable")
        yield page
    finally:
        process.kill()
        process.wait()
        os.close(to_browser[1])
        os.close(from_browser[0])
