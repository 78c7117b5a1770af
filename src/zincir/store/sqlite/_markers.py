"""Step claims kept as markers in a file beside the database (``claim_markers=True``).

A store in this mode writes each step claim as one line appended to its own file in the
folder ``<database>-claims`` instead of committing it: a ``write`` that survives the
process's death (the kernel keeps it), costs no transaction, and is not seen by other
processes while this one lives. The store holds an exclusive ``flock`` on its file for its
lifetime, so a file whose lock can be taken belongs to a dead process; every SQLite store
that opens the database or takes a lease on a run first adopts such files: their
unfinished claims become ordinary claim rows (StepInProgress until ``recover()``), and the
file is deleted. A claim's line is resolved by its result row (or a release line); a file
whose claims are all resolved is truncated.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass

import apsw

from ..._errors import StoreError

__all__ = [
    "ClaimMarkers",
    "MarkedClaim",
    "adopt_claims",
    "dead_marker_files",
    "marker_folder",
    "remove_if_empty",
]

_SUFFIX = ".claims"
_TRUNCATE_AT = 1 << 20  # bytes of resolved lines a file may hold before it is emptied
_ADOPT = (
    "INSERT INTO step_claims (run_id, name, claim_owner, claim_token, started_at) "
    "SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM agent_runs WHERE id = ?1 "
    "AND status IN ('pending', 'running')) ON CONFLICT (run_id, name) DO NOTHING"
)
"""A dead process's claim as a row, unless the step has one (its result, or another
claim) or its run has ended."""


@dataclass(frozen=True, slots=True)
class MarkedClaim:
    """One unfinished step claim held as a marker: whose it is and since when."""

    run_id: str
    name: str
    owner: str
    token: int
    started_at: str


def marker_folder(database_path: str) -> str:
    """The folder holding the marker files of the database at ``database_path``."""
    return f"{database_path}-claims"


class ClaimMarkers:
    """This store's marker file and the unfinished claims it holds (shared by its contexts)."""

    def __init__(self, database_path: str) -> None:
        self.folder = marker_folder(database_path)
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], MarkedClaim] = {}
        self._fd: int | None = None
        self._path: str | None = None
        self._written = 0

    def held(self, run_id: str, name: str) -> MarkedClaim | None:
        """The unfinished claim this store holds on step ``name`` of ``run_id``, if any."""
        return self._claims.get((run_id, name))

    def of_run(self, run_id: str) -> list[MarkedClaim]:
        """Every unfinished claim this store holds in ``run_id``."""
        with self._lock:
            return [claim for (run, _), claim in self._claims.items() if run == run_id]

    def unfinished(self) -> list[MarkedClaim]:
        """Every unfinished claim this store holds."""
        with self._lock:
            return list(self._claims.values())

    def claim(self, claim: MarkedClaim) -> None:
        """Write ``claim``'s marker; it is in the file when this returns."""
        line = json.dumps(
            ["c", claim.run_id, claim.name, claim.owner, claim.token, claim.started_at],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        with self._lock:
            self._append(line)
            self._claims[claim.run_id, claim.name] = claim

    def resolve(self, run_id: str, name: str) -> None:
        """Forget the claim on ``name``: its result row is committed."""
        with self._lock:
            self._claims.pop((run_id, name), None)
            self._truncate_if_resolved()

    def release(self, claims: Iterable[MarkedClaim]) -> None:
        """Drop ``claims`` (abandoned or recovered) with a release line each, so a crash
        after this does not make them rows."""
        with self._lock:
            for claim in claims:
                if self._claims.get((claim.run_id, claim.name)) != claim:
                    continue
                line = json.dumps(
                    ["r", claim.run_id, claim.name, claim.token],
                    ensure_ascii=False,
                    separators=(",", ":"),
                )
                self._append(line)
                del self._claims[claim.run_id, claim.name]
            self._truncate_if_resolved()

    def close(self, *, delete: bool) -> None:
        """Give up the file's lock; ``delete`` it once every claim is resolved or adopted
        as a row (kept, the next store to open the database adopts it)."""
        with self._lock:
            self._claims.clear()
            if self._fd is None:
                return
            if delete and self._path is not None:
                with suppress(FileNotFoundError):
                    os.unlink(self._path)
            os.close(self._fd)  # drops the flock
            self._fd = self._path = None
            if delete:
                remove_if_empty(self.folder)

    def _append(self, line: str) -> None:
        data = (line + "\n").encode("utf-8")
        fd = self._fd if self._fd is not None else self._open()
        try:
            written = os.write(fd, data)
        except OSError as error:
            raise StoreError(f"could not write a step claim to {self._path}: {error}") from None
        if written != len(data):  # a full disk: the line is partial, and will be skipped
            raise StoreError(f"could not write a step claim to {self._path}: short write")
        self._written += written

    def _open(self) -> int:
        """Create this store's file, locked before it gets the name other stores scan for."""
        base = os.path.join(self.folder, uuid.uuid4().hex)
        try:
            for attempt in range(3):  # another store may remove the empty folder meanwhile
                os.makedirs(self.folder, exist_ok=True)
                try:
                    fd = os.open(f"{base}.new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
        except OSError as error:
            raise StoreError(
                f"could not create a claim marker file in {self.folder}: {error}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(f"{base}.new", base + _SUFFIX)
        except OSError as error:
            os.close(fd)
            with suppress(FileNotFoundError):
                os.unlink(f"{base}.new")
            raise StoreError(
                f"could not create a claim marker file in {self.folder}: {error}"
            ) from None
        self._fd, self._path = fd, base + _SUFFIX
        return fd

    def _truncate_if_resolved(self) -> None:
        if self._claims or self._written < _TRUNCATE_AT or self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        self._written = 0


@dataclass(slots=True)
class DeadFile:
    """A dead store's marker file, locked by this process until :meth:`done`."""

    path: str
    fd: int
    claims: list[MarkedClaim]

    def done(self, *, delete: bool) -> None:
        if delete:
            with suppress(FileNotFoundError):
                os.unlink(self.path)
        os.close(self.fd)


def dead_marker_files(folder: str) -> list[DeadFile]:
    """The marker files in ``folder`` whose stores are gone, each locked, with its claims."""
    try:
        names = [name for name in os.listdir(folder) if name.endswith(_SUFFIX)]
    except FileNotFoundError:
        return []
    dead = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # adopted by another store meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its store is alive
            os.close(fd)
            continue
        if os.fstat(fd).st_ino != _inode(path):  # adopted and deleted before the lock
            os.close(fd)
            continue
        with os.fdopen(os.dup(fd), "rb") as stream:
            claims = list(_unfinished(stream.read().splitlines()))
        dead.append(DeadFile(path, fd, claims))
    return dead


def adopt_claims(conn: apsw.Connection, claims: Iterable[MarkedClaim]) -> None:
    """Insert ``claims`` as claim rows (a transaction function: touches only ``conn``)."""
    for claim in claims:
        conn.execute(_ADOPT, (claim.run_id, claim.name, claim.owner, claim.token, claim.started_at))


def remove_if_empty(folder: str) -> None:
    """Remove the marker folder once it holds no file."""
    with suppress(OSError):
        os.rmdir(folder)


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _unfinished(lines: list[bytes]) -> Iterator[MarkedClaim]:
    """The claims a file's lines leave unreleased; a torn or foreign line is skipped."""
    claims: dict[tuple[str, str], MarkedClaim] = {}
    for line in lines:
        try:
            record = json.loads(line)
            if record[0] == "c":
                _, run_id, name, owner, token, started_at = record
                claim = MarkedClaim(str(run_id), str(name), str(owner), int(token), str(started_at))
                claims[claim.run_id, claim.name] = claim
            elif record[0] == "r":
                _, run_id, name, token = record
                held = claims.get((str(run_id), str(name)))
                if held is not None and held.token == int(token):
                    del claims[held.run_id, held.name]
        except (ValueError, TypeError, IndexError, KeyError):
            continue
    yield from claims.values()
