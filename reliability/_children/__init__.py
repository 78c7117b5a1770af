"""Child processes of the fault-injection scenarios, and :class:`Child` to run one.

Each script here (``python -m reliability._children.NAME``) installs
:class:`reliability._fault_vfs.FaultVFS` as SQLite's default VFS before zincir opens
anything, so zincir's own connections run on the faulty disk unchanged, and reports on
stdout one line per fact the parent checks.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["FAST_FOLDER", "REPO", "Child"]

REPO = Path(__file__).resolve().parents[2]
FAST_FOLDER = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
"""Where the scenarios keep their databases: tmpfs where there is one, so each fsync is
still issued (and may be failed or recorded by the fault VFS) but costs microseconds."""


class Child:
    """A running child script; its stdout is read on a thread, so reads can time out."""

    def __init__(self, script: str, *args: str, stderr_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
        self._stderr_path = stderr_path
        with stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", f"reliability._children.{script}", *args],
                cwd=REPO,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self, timeout: float) -> str | None:
        """The next line the child printed; None once it exited; TimeoutError if it is silent."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"the child printed nothing for {timeout:g} s") from None
        if line is None:
            self._lines.put(None)  # the end stays marked for later calls
        return line

    def rest(self, timeout: float = 60.0) -> list[str]:
        """Every line still to read, after the child exited (or was killed)."""
        self.process.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        lines = []
        while (line := self._lines.get(timeout=timeout)) is not None:
            lines.append(line)
        self._lines.put(None)  # the end stays marked for a later call
        if self.process.stdout is not None:
            self.process.stdout.close()
        return lines

    def kill(self) -> list[str]:
        """SIGKILL the child (a power cut, as far as its process is concerned); return the
        lines it printed before it died and that were not read yet."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        return self.rest()

    def stderr(self) -> str:
        """What the child wrote to stderr (its traceback, if it failed)."""
        return self._stderr_path.read_text(errors="replace")
