"""A SQLite VFS that injects the faults a disk can produce: lost unsynced writes, I/O errors.

:class:`FaultVFS` passes every file operation through to SQLite's own ``unix`` VFS, so the
database files are real. Registered with ``makedefault=True`` in a child process, it is
what zincir's unchanged ``apsw.Connection(path)`` uses. It does two things:

- **Durable images** (``track_durability=True``): for the main database, its WAL and its
  rollback journal it keeps ``<file>-durable``, the file as a power loss would leave it.
  Writes and truncations are queued per file (an fsync covers every handle of a file, so
  the queue is per path) and applied to the image only at ``xSync``. After the process is
  SIGKILLed, :func:`lose_power` puts every image in place of its file and deletes the
  ``-shm`` (shared memory does not survive a power loss). A deletion (``xDelete``) is taken
  as durable at once: SQLite syncs the directory when it depends on one.
- **I/O faults** (:meth:`FaultVFS.arm`): fail the k-th eligible operation (or, persistent,
  every one from the k-th on) with the error a real disk returns: ``SQLITE_IOERR_*`` for
  any operation, ``SQLITE_FULL`` for writes.

The ``-shm`` file is mapped by the ``unix`` VFS itself (APSW forwards ``xShm*`` to it), so
its operations are neither counted nor failed.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import apsw

__all__ = [
    "DURABLE_SUFFIX",
    "FAULT_KINDS",
    "FaultPlan",
    "FaultVFS",
    "lose_power",
]

DURABLE_SUFFIX = "-durable"
"""Appended to a file's path to name its durable image."""

_BASE_VFS = "unix"
_OPEN_MAIN_DB = apsw.mapping_open_flags["SQLITE_OPEN_MAIN_DB"]
_OPEN_WAL = apsw.mapping_open_flags["SQLITE_OPEN_WAL"]
_OPEN_MAIN_JOURNAL = apsw.mapping_open_flags["SQLITE_OPEN_MAIN_JOURNAL"]
_DURABLE_FILES = _OPEN_MAIN_DB | _OPEN_WAL | _OPEN_MAIN_JOURNAL

FaultKind = Literal["ioerr", "full"]
Operation = Literal["open", "read", "write", "sync", "truncate", "filesize", "lock"]

_IOERR_CODES: dict[str, int] = {
    "open": apsw.SQLITE_CANTOPEN,
    "read": apsw.SQLITE_IOERR_READ,
    "write": apsw.SQLITE_IOERR_WRITE,
    "sync": apsw.SQLITE_IOERR_FSYNC,
    "truncate": apsw.SQLITE_IOERR_TRUNCATE,
    "filesize": apsw.SQLITE_IOERR_FSTAT,
    "lock": apsw.SQLITE_IOERR_LOCK,
}

FAULT_KINDS: dict[str, dict[str, int]] = {
    "ioerr": _IOERR_CODES,
    "full": {"write": apsw.SQLITE_FULL},
}
"""For each fault kind, the operations it can fail and the SQLite code each one returns."""


@dataclass(frozen=True)
class FaultPlan:
    """Fail the ``at``-th operation eligible for ``kind`` (1-based), and with
    ``persistent`` every eligible one after it too, until :meth:`FaultVFS.disarm`.
    ``operations`` narrows the eligible operations (say, only ``sync``)."""

    kind: FaultKind
    at: int
    persistent: bool = False
    operations: frozenset[str] | None = None

    def eligible(self, operation: str) -> bool:
        """Whether this plan counts (and may fail) ``operation``."""
        allowed = FAULT_KINDS[self.kind]
        return operation in allowed and (self.operations is None or operation in self.operations)

    def fails(self, ordinal: int) -> bool:
        """Whether the eligible operation numbered ``ordinal`` fails."""
        return ordinal == self.at or (self.persistent and ordinal > self.at)


class _DurableImage:
    """One file's durable image and the writes made to it since its last sync."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.image = path + DURABLE_SUFFIX
        self.pending: list[tuple[int, bytes] | int] = []
        self.lock = threading.Lock()
        if not os.path.exists(self.image):
            # The file as this process found it is durable (a clean close or a restored
            # image); copy then rename, so a kill mid-copy leaves no partial image.
            staging = self.image + ".tmp"
            if os.path.exists(path):
                shutil.copyfile(path, staging)
            else:
                Path(staging).write_bytes(b"")
            os.replace(staging, self.image)

    def sync(self) -> None:
        """Apply the pending writes and truncations to the image, in order."""
        if not self.pending:
            return
        fd = os.open(self.image, os.O_WRONLY)
        try:
            for operation in self.pending:
                if isinstance(operation, int):
                    os.ftruncate(fd, operation)
                else:
                    offset, data = operation
                    os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        self.pending.clear()


class FaultVFS(apsw.VFS):
    """The ``unix`` VFS plus durable images and injected I/O errors (see the module doc)."""

    def __init__(
        self,
        name: str = "zincir-fault",
        *,
        makedefault: bool = True,
        track_durability: bool = False,
    ) -> None:
        self.vfs_name = name
        self.track_durability = track_durability
        self.calls: Counter[str] = Counter()
        self.injected = 0
        self.failed: list[str] = []
        """Each injected failure: the operation and the file's name."""
        self._plan: FaultPlan | None = None
        self._eligible = 0
        self._lock = threading.Lock()
        self._images: dict[str, _DurableImage] = {}
        super().__init__(name, _BASE_VFS, makedefault=makedefault)

    # -- faults ---------------------------------------------------------------------------

    def arm(self, plan: FaultPlan) -> None:
        """Start counting eligible operations from zero and fail them as ``plan`` says."""
        with self._lock:
            self._plan, self._eligible, self.injected = plan, 0, 0
            self.calls.clear()
            self.failed.clear()

    def disarm(self) -> None:
        """The fault clears: every operation succeeds again (counting goes on)."""
        with self._lock:
            self._plan = None

    @property
    def eligible(self) -> int:
        """Operations the armed plan's kind could have failed, since :meth:`arm`."""
        return self._eligible

    def check(self, operation: Operation, path: str | None = None) -> None:
        """Count ``operation`` (on the file at ``path``); raise the planned SQLite error if
        it is the one to fail, noting it in :attr:`failed`."""
        with self._lock:
            self.calls[operation] += 1
            plan = self._plan
            if plan is None:
                return
            if not plan.eligible(operation):
                return
            self._eligible += 1
            if not plan.fails(self._eligible):
                return
            self.injected += 1
            self.failed.append(f"{operation} {os.path.basename(path or '(temporary file)')}")
        raise apsw.exception_for(FAULT_KINDS[plan.kind][operation])

    # -- durable images -------------------------------------------------------------------

    def image_for(self, path: str) -> _DurableImage:
        """The durable image of ``path``, made from the file as it is on first use."""
        with self._lock:
            image = self._images.get(path)
            if image is None:
                image = self._images[path] = _DurableImage(path)
            return image

    # -- the VFS methods ------------------------------------------------------------------

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> FaultFile:
        """Open through the ``unix`` VFS; a database, WAL or journal gets its durable image."""
        path = name.filename() if isinstance(name, apsw.URIFilename) else name
        self.check("open", path)
        image = None
        if self.track_durability and path is not None and flags[0] & _DURABLE_FILES:
            image = self.image_for(path)
        return FaultFile(self, name, flags, image)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        """Delete the file and its durable image (a deletion counts as durable at once)."""
        super().xDelete(filename, syncdir)
        if self.track_durability:
            with self._lock:
                self._images.pop(filename, None)
            Path(filename + DURABLE_SUFFIX).unlink(missing_ok=True)


class FaultFile(apsw.VFSFile):
    """A file of :class:`FaultVFS`: the real file, counted, failed and imaged as planned."""

    def __init__(
        self,
        vfs: FaultVFS,
        name: str | apsw.URIFilename | None,
        flags: list[int],
        image: _DurableImage | None,
    ) -> None:
        self._vfs = vfs
        self._image = image
        self._path = name.filename() if isinstance(name, apsw.URIFilename) else name
        super().__init__(_BASE_VFS, name, flags)

    def xRead(self, amount: int, offset: int) -> bytes:
        """Read, unless this read is the one to fail."""
        self._vfs.check("read", self._path)
        return super().xRead(amount, offset)  # type: ignore[no-any-return]

    def xWrite(self, data: bytes, offset: int) -> None:
        """Write through to the file; queue the write for the image until the next sync."""
        self._vfs.check("write", self._path)
        image = self._image
        if image is None:
            super().xWrite(data, offset)
            return
        with image.lock:
            super().xWrite(data, offset)
            image.pending.append((offset, bytes(data)))

    def xTruncate(self, newsize: int) -> None:
        """Truncate the file; queue the truncation for the image until the next sync."""
        self._vfs.check("truncate", self._path)
        image = self._image
        if image is None:
            super().xTruncate(newsize)
            return
        with image.lock:
            super().xTruncate(newsize)
            image.pending.append(newsize)

    def xSync(self, flags: int) -> None:
        """fsync the file, then apply every queued write to the image: now it is durable."""
        self._vfs.check("sync", self._path)
        image = self._image
        if image is None:
            super().xSync(flags)
            return
        with image.lock:
            super().xSync(flags)
            image.sync()

    def xFileSize(self) -> int:
        """The file's size, unless this call is the one to fail."""
        self._vfs.check("filesize", self._path)
        return super().xFileSize()  # type: ignore[no-any-return]

    def xLock(self, level: int) -> None:
        """Take the lock, unless this call is the one to fail."""
        self._vfs.check("lock", self._path)
        super().xLock(level)


def lose_power(database: str | Path) -> list[str]:
    """After the writing process was SIGKILLed: put each durable image of ``database``, its
    WAL and its journal in place of the file and delete the ``-shm``; return the files
    replaced."""
    replaced = []
    for suffix in ("", "-wal", "-journal"):
        path = f"{database}{suffix}"
        Path(path + DURABLE_SUFFIX + ".tmp").unlink(missing_ok=True)
        image = path + DURABLE_SUFFIX
        if os.path.exists(image):
            os.replace(image, path)
            replaced.append(path)
    Path(f"{database}-shm").unlink(missing_ok=True)
    return replaced
