"""Every named read of the read-only view, listed once: each backend's snapshot is this over
its own read transaction (a new family of reads is added here, not in both backends)."""

from __future__ import annotations

from ._forks import ForkReads
from ._queue_reads import QueueReads
from ._readonly_queries import SnapshotQueries
from ._streams import StreamReads
from ._thread_reads import ThreadReads

__all__ = ["SnapshotReads"]


class SnapshotReads(SnapshotQueries, ThreadReads, StreamReads, ForkReads, QueueReads):
    """The runs, threads, streams, forks, queues and schedules a read-only snapshot
    answers."""
