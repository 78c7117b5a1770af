"""Restart checkpoints: how far application code has consumed a run's replay.

A checkpoint is keyed by (run id, checkpoint id) and carries a revision and a JSON payload.
Revisions only move forward: an identical rewrite is a no-op; an older revision, or another
payload at the same revision, raises ``RevisionConflict`` and changes nothing. Two stores
keep that contract: ``FileRestartStore`` (atomic files in an owner-only folder) and
``SQLRestartStore`` (the zincir store's ``restart_checkpoints`` table).
"""

from __future__ import annotations

from ._file import FileRestartStore
from ._protocol import RestartCheckpoint, RestartStore
from ._sql import SQLRestartStore
from ._stream import CheckpointedStreamSink

__all__ = [
    "CheckpointedStreamSink",
    "FileRestartStore",
    "RestartCheckpoint",
    "RestartStore",
    "SQLRestartStore",
]
