"""``FileRestartStore``: restart checkpoints as files in one owner-only folder.

One file per checkpoint, named ``<run id>.<checkpoint id>.ckpt`` with both ids
percent-encoded: only ``a-z 0-9 _ -`` stay as they are (upper case and every other UTF-8
byte become ``%XX``), so a name is ASCII, no id can reach outside the folder, and no two
ids share a file, even on a case-insensitive or Unicode-normalising filesystem. A name
over 200 characters becomes ``=<sha256 of that name>.ckpt``. A file holds one JSON document:

    version 2  {"version": 2, "run_id": …, "checkpoint_id": …, "revision": N,
                "updated_at": "…Z", "payload": …}
    version 1  {"version": 1, "revision": N, "payload": …}   read, rewritten as 2 on a save

A save writes ``.<name>.tmp`` in the folder, fsyncs it, renames it over the file and
fsyncs the folder, so a crash leaves the old file or the new one, never a torn one. Saves
and removes hold an advisory lock (``flock`` on ``.lock``) around read-compare-write, so
processes sharing the folder agree on one winner per revision. Temp files are never read
as checkpoints; one left by a killed process is removed when a store opens the folder or
the same checkpoint is saved again.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote_to_bytes

from .._errors import (
    DatabaseReadOnly,
    InvalidInput,
    InvalidPayload,
    PayloadTooLarge,
    RevisionConflict,
    StoreError,
    StoreUnavailable,
    UnsupportedVersion,
    ZincirError,
)
from .._json import StrictJsonError, encode_checked, loads_own, loads_strict_text
from .._time import system_clock, to_db
from .._validate import check_id, int_problem, shown
from ._checks import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    canonical,
    check_key,
    check_max_payload,
    encode_payload,
)
from ._protocol import RestartCheckpoint

__all__ = ["FileRestartStore", "file_name"]

VERSION: Final = 2
_FIELDS: Final = {
    1: frozenset({"version", "revision", "payload"}),
    2: frozenset({"version", "run_id", "checkpoint_id", "revision", "updated_at", "payload"}),
}
_SUFFIX: Final = ".ckpt"
_TEMP: Final = ".tmp"
_LOCK: Final = ".lock"
_MAX_NAME: Final = 200
_OVERHEAD: Final = 4096  # a document's bytes besides its payload: version, ids, revision, stamp
_SAFE: Final = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES: Final = tuple(chr(b) if b in _SAFE else f"%{b:02X}" for b in range(256))
_NOFOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC


def _escape(text: str) -> str:
    return "".join([_ESCAPES[byte] for byte in text.encode("utf-8")])


def _unescape(part: str) -> str | None:
    """The id ``part`` is the escape of, or None when no id escapes to it."""
    try:
        text = unquote_to_bytes(part).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text and _escape(text) == part else None


def file_name(run_id: str, checkpoint_id: str) -> str:
    """The name of a checkpoint's file in the folder (one per id pair, never the same)."""
    stem = f"{_escape(run_id)}.{_escape(checkpoint_id)}"
    if len(stem) + len(_SUFFIX) > _MAX_NAME:
        stem = "=" + hashlib.sha256(stem.encode("ascii")).hexdigest()
    return stem + _SUFFIX


@dataclass(frozen=True, slots=True)
class _Stored:
    version: int
    checkpoint: RestartCheckpoint


def _translate(error: OSError, path: str, run_id: str | None) -> ZincirError:
    """The zincir error for a failed file operation on ``path``."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        return StoreUnavailable(f"I/O error on {path} ({error}); try again", run_id=run_id)
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return DatabaseReadOnly(
            f"{path} cannot be written ({error}); check the folder's permissions and mount",
            run_id=run_id,
        )
    if error.errno == errno.ELOOP:
        return StoreError(
            f"{path} is a symbolic link; a checkpoint folder holds only its own files",
            run_id=run_id,
        )
    return StoreError(f"cannot use {path} ({error})", run_id=run_id)


@contextmanager
def _file_errors(path: str, run_id: str | None = None) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise _translate(error, path, run_id) from None


def _is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TEMP)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _check_folder(path: str, run_id: str | None = None) -> None:
    """Refuse a folder that is a symlink, not a folder, not ours, or writable by others."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise StoreError(
            f"the checkpoint folder {path} is gone; create the store again", run_id=run_id
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise InvalidInput(
            f"the checkpoint folder {path} is a symbolic link; give the real folder, so "
            "nobody can redirect the checkpoints by changing the link",
            run_id=run_id,
        )
    if not stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"{path} is not a folder", run_id=run_id)
    if info.st_uid != os.geteuid():
        raise InvalidInput(
            f"the checkpoint folder {path} belongs to user {info.st_uid}, not to this "
            f"process's user {os.geteuid()}; use a folder of your own",
            run_id=run_id,
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InvalidInput(
            f"the checkpoint folder {path} can be written by its group or others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); others could replace checkpoints: "
            f"run `chmod 700 {path}` or use another folder",
            run_id=run_id,
        )


def _decode(data: bytes, path: str, key: tuple[str, str] | None) -> _Stored | None:
    """The checkpoint in a file's bytes; None for a version 1 file whose ids are not known
    from ``key`` (a listing of hashed names). InvalidPayload for a damaged file."""
    run_hint = None if key is None else key[0]

    def bad(problem: str) -> InvalidPayload:
        return InvalidPayload(
            f"the checkpoint file {path} {problem}; restore it or remove it", run_id=run_hint
        )

    try:
        document = loads_strict_text(data)
    except StrictJsonError as error:
        raise bad(f"is not a JSON document ({error})") from None
    if not isinstance(document, dict):
        raise bad("does not hold a JSON object")
    version = document.get("version")
    if isinstance(version, bool) or version not in _FIELDS:
        raise UnsupportedVersion(
            f"the checkpoint file {path} has format version {shown(version)}; this zincir "
            f"reads versions {', '.join(map(str, _FIELDS))}: upgrade zincir",
            run_id=run_hint,
        )
    if set(document) != _FIELDS[version]:
        raise bad(f"holds the fields {sorted(document)}, not {sorted(_FIELDS[version])}")
    revision = document["revision"]
    problem = int_problem("its revision", revision)
    if problem is not None:
        raise bad(f"is damaged: {problem}")
    if version == 1:
        if key is None:
            return None
        run_id, checkpoint_id = key
    else:
        run_id, checkpoint_id = document["run_id"], document["checkpoint_id"]
        if not isinstance(run_id, str) or not isinstance(checkpoint_id, str):
            raise bad("holds ids that are not text")
        if (key is not None and key != (run_id, checkpoint_id)) or file_name(
            run_id, checkpoint_id
        ) != os.path.basename(path):
            raise bad(f"holds checkpoint {checkpoint_id!r} of run {run_id!r}, not this file's")
    return _Stored(version, RestartCheckpoint(run_id, checkpoint_id, revision, document["payload"]))


def _document(run_id: str, checkpoint_id: str, revision: int, payload_json: str) -> bytes:
    """A version 2 file's bytes; the payload's JSON text is written as it was checked."""
    head = encode_checked(
        {
            "version": VERSION,
            "run_id": run_id,
            "checkpoint_id": checkpoint_id,
            "revision": revision,
            "updated_at": to_db(system_clock()),
        }
    )
    return (head[:-1] + ',"payload":' + payload_json + "}").encode("utf-8")


class FileRestartStore:
    """A :class:`RestartStore` in a folder of its own: created 0700 if missing, files 0600.
    Refuses a symlinked folder, and one that another user owns or its group or others can
    write (an existing folder's mode is otherwise left as its owner set it).

    ``max_payload_bytes`` bounds a payload as JSON (1 MiB by default); a file larger than
    the bound allows is refused when read. The folder may be shared by processes of the
    same user: saves are serialised by an advisory lock.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        try:
            folder = os.fspath(directory)
        except TypeError:
            raise InvalidInput(
                f"directory must be a path (str or os.PathLike), not {shown(directory)}"
            ) from None
        if not isinstance(folder, str) or not folder or "\x00" in folder:
            raise InvalidInput(f"directory must be a non-empty text path, not {shown(folder)}")
        self.directory = os.path.abspath(folder)
        self.max_payload_bytes = check_max_payload(max_payload_bytes)
        self._lock_path = os.path.join(self.directory, _LOCK)
        with _file_errors(self.directory):
            self._open_folder()

    def _open_folder(self) -> None:
        """Create the folder (0700) if it is missing, check it, and remove the temp files
        killed saves left behind."""
        try:
            os.makedirs(self.directory, mode=0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(self.directory, 0o700)  # whatever the umask
        _check_folder(self.directory)
        if not any(_is_temp(name) for name in os.listdir(self.directory)):
            return
        with self._locked():  # no save is writing its temp file meanwhile
            for name in os.listdir(self.directory):
                if _is_temp(name):
                    _unlink_quietly(os.path.join(self.directory, name))

    # -- the folder, its lock and its files ------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the folder's advisory lock: one read-compare-write at a time, across
        processes and threads (each holder opens the lock file anew)."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _path(self, run_id: str, checkpoint_id: str) -> str:
        return os.path.join(self.directory, file_name(run_id, checkpoint_id))

    def _read(self, path: str, key: tuple[str, str] | None, run_id: str) -> _Stored | None:
        """The checkpoint in the file at ``path``, or None when there is none."""
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(f"{path} is not a regular file", run_id=run_id)
            limit = self.max_payload_bytes + _OVERHEAD
            data = file.read(limit + 1)
        if len(data) > limit:
            raise PayloadTooLarge(
                f"the checkpoint file {path} is over this store's {self.max_payload_bytes:,}"
                "-byte payload bound; open the store with a larger max_payload_bytes",
                run_id=run_id,
            )
        return _decode(data, path, key)

    def _replace(self, path: str, data: bytes) -> None:
        """Make ``data`` the file at ``path`` atomically and durably."""
        temp = os.path.join(self.directory, "." + os.path.basename(path) + _TEMP)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(temp)
            raise
        os.close(fd)
        try:
            os.replace(temp, path)
        except BaseException:
            _unlink_quietly(temp)
            raise
        self._sync_folder()

    def _sync_folder(self) -> None:
        """Make a rename or an unlink in the folder durable."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- blocking operations (run on a worker thread) -------------------------------------

    def _load_now(self, run_id: str, checkpoint_id: str) -> RestartCheckpoint | None:
        path = self._path(run_id, checkpoint_id)
        with _file_errors(path, run_id):
            _check_folder(self.directory, run_id)
            stored = self._read(path, (run_id, checkpoint_id), run_id)
        return None if stored is None else stored.checkpoint

    def _save_now(
        self, run_id: str, checkpoint_id: str, revision: int, payload_json: str
    ) -> RestartCheckpoint:
        path = self._path(run_id, checkpoint_id)
        with _file_errors(path, run_id):
            _check_folder(self.directory, run_id)
            with self._locked():
                stored = self._read(path, (run_id, checkpoint_id), run_id)
                if stored is not None:
                    old = stored.checkpoint
                    if revision < old.revision:
                        raise RevisionConflict(
                            f"checkpoint {checkpoint_id!r} is at revision {old.revision}; "
                            f"revision {revision} is older: load the checkpoint and continue "
                            "from there",
                            run_id=run_id,
                        )
                    if revision == old.revision:
                        if canonical(old.payload) != canonical(loads_own(payload_json)):
                            raise RevisionConflict(
                                f"checkpoint {checkpoint_id!r} already holds revision "
                                f"{old.revision} with another payload; offered revision "
                                f"{revision} diverges from it: save the next revision instead",
                                run_id=run_id,
                            )
                        if stored.version == VERSION:
                            return old
                        payload_json = encode_checked(old.payload)  # upgrade the file
                self._replace(path, _document(run_id, checkpoint_id, revision, payload_json))
        return RestartCheckpoint(run_id, checkpoint_id, revision, loads_own(payload_json))

    def _remove_now(self, run_id: str, checkpoint_id: str) -> bool:
        path = self._path(run_id, checkpoint_id)
        with _file_errors(path, run_id):
            _check_folder(self.directory, run_id)
            with self._locked():
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    return False
                self._sync_folder()
        return True

    def _list_now(self, run_id: str) -> builtins.list[RestartCheckpoint]:
        found = []
        prefix = _escape(run_id) + "."
        with _file_errors(self.directory, run_id):
            _check_folder(self.directory, run_id)
            names = os.listdir(self.directory)
        for name in names:
            key: tuple[str, str] | None = None
            if not name.endswith(_SUFFIX):
                continue
            if name.startswith(prefix):
                checkpoint_id = _unescape(name[len(prefix) : -len(_SUFFIX)])
                if checkpoint_id is None:
                    continue
                key = (run_id, checkpoint_id)
            elif not name.startswith("="):
                continue
            path = os.path.join(self.directory, name)
            with _file_errors(path, run_id):
                stored = self._read(path, key, run_id)
            if stored is not None and stored.checkpoint.run_id == run_id:
                found.append(stored.checkpoint)
        return sorted(found, key=lambda checkpoint: checkpoint.checkpoint_id)

    # -- the RestartStore contract --------------------------------------------------------

    async def load(self, run_id: str, checkpoint_id: str) -> RestartCheckpoint | None:
        """The stored checkpoint, or None."""
        run_id, checkpoint_id = check_key(run_id, checkpoint_id)
        return await asyncio.to_thread(self._load_now, run_id, checkpoint_id)

    async def save(
        self, run_id: str, checkpoint_id: str, revision: int, payload: Any
    ) -> RestartCheckpoint:
        """Store ``revision`` with ``payload`` and return what is stored; RevisionConflict if
        it is older than the stored revision or differs from it at the same revision."""
        run_id, checkpoint_id, revision, text = encode_payload(
            run_id, checkpoint_id, revision, payload, self.max_payload_bytes
        )
        return await asyncio.to_thread(self._save_now, run_id, checkpoint_id, revision, text)

    async def remove(self, run_id: str, checkpoint_id: str) -> bool:
        """Delete the checkpoint; whether there was one. A later save starts it afresh."""
        run_id, checkpoint_id = check_key(run_id, checkpoint_id)
        return await asyncio.to_thread(self._remove_now, run_id, checkpoint_id)

    async def list(self, run_id: str) -> builtins.list[RestartCheckpoint]:
        """The run's checkpoints, ordered by checkpoint id (for tooling)."""
        run_id = check_id(run_id, "a run id")
        return await asyncio.to_thread(self._list_now, run_id)
