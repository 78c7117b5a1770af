"""Workspace revisions: what is really in a folder, hashed by zincir itself, so a checkpoint
is bound to the files it claims rather than to labels the agent supplies.

A revision is the SHA-256 of every file's path and content digest, in path order (a symlink
counts by its target text; ``.git`` is left out, as version-control bookkeeping). The
per-file digests are kept so that a drift can name the paths that differ.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._errors import InvalidInput, WorkspaceDrift

__all__ = ["WorkspaceRevision", "check_folder", "compare", "snapshot"]

_SKIPPED: Final = frozenset({".git"})
_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class WorkspaceRevision:
    """A folder's content at one moment: its path, the revision digest and each file's."""

    path: str
    revision: str
    files: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "revision": self.revision, "files": dict(self.files)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkspaceRevision:
        return cls(str(data["path"]), str(data["revision"]), dict(data.get("files") or {}))


def check_folder(path: object, *, run_id: str | None = None) -> Path:
    """The workspace as an absolute folder path; InvalidInput for anything else."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidInput(f"workspace must be a folder path, not {path!r}", run_id=run_id)
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise InvalidInput(f"workspace {str(folder)!r} is not a folder", run_id=run_id)
    return folder


def _digest(file: Path) -> str:
    if file.is_symlink():
        return "link:" + hashlib.sha256(os.readlink(file).encode()).hexdigest()
    hasher = hashlib.sha256()
    with file.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def snapshot(folder: Path) -> WorkspaceRevision:
    """Hash every file under ``folder`` (blocking: run it off the event loop)."""
    files: dict[str, str] = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED)
        base = Path(root)
        for name in names:
            file = base / name
            files[file.relative_to(folder).as_posix()] = _digest(file)
        for name in dirs:
            if (base / name).is_symlink():
                files[(base / name).relative_to(folder).as_posix()] = _digest(base / name)
    revision = hashlib.sha256()
    for name in sorted(files):
        revision.update(f"{name}\0{files[name]}\n".encode())
    return WorkspaceRevision(str(folder), "sha256:" + revision.hexdigest(), files)


def compare(accepted: WorkspaceRevision, current: WorkspaceRevision, run_id: str) -> None:
    """WorkspaceDrift naming every path changed, added or removed since ``accepted``."""
    if accepted.revision == current.revision:
        return
    before, now = accepted.files, current.files
    changed = sorted(name for name in before.keys() & now.keys() if before[name] != now[name])
    added = sorted(now.keys() - before.keys())
    removed = sorted(before.keys() - now.keys())
    raise WorkspaceDrift(
        accepted.revision, current.revision, changed, added, removed, run_id=run_id
    )
