"""Records of LangGraph checkpoints, their tasks' pending writes and thread leases.

The store keeps what ``zincir.integrations.langgraph`` serialized: values arrive and leave
as (type tag, bytes) and metadata as JSON text; the store never decodes a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from ._records import TimeDecoder, driver_time

__all__ = [
    "GRAPH_ROW_COLUMNS",
    "GRAPH_WRITE_COLUMNS",
    "GraphCheckpointQuery",
    "GraphCheckpointRow",
    "GraphWrite",
    "NewGraphCheckpoint",
    "ThreadLease",
    "graph_checkpoint_row",
    "graph_write",
]


@dataclass(frozen=True, slots=True)
class GraphWrite:
    """One pending write of a task: its position (``idx`` < 0 for LangGraph's special
    channels, which a later write replaces) and its serialized value."""

    task_id: str
    idx: int
    channel: str
    type: str
    value: bytes
    task_path: str = ""


@dataclass(frozen=True, slots=True)
class NewGraphCheckpoint:
    """A checkpoint to store; a stored one with the same key is replaced."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata_json: str
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class GraphCheckpointRow:
    """A stored checkpoint with its pending writes, in LangGraph's replay order
    (task path, task id, idx)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata_json: str
    run_id: str | None
    created_at: datetime
    writes: tuple[GraphWrite, ...]


GRAPH_ROW_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    "metadata, run_id, created_at"
)
"""The ``langgraph_checkpoints`` columns :func:`graph_checkpoint_row` reads, in order."""
GRAPH_WRITE_COLUMNS: Final = "task_id, idx, channel, type, value, task_path"
"""The ``langgraph_writes`` columns :func:`graph_write` reads, in order."""


def graph_write(row: Sequence[Any]) -> GraphWrite:
    """A pending write selected as :data:`GRAPH_WRITE_COLUMNS`."""
    task_id, idx, channel, type_, value, task_path = row
    return GraphWrite(task_id, int(idx), channel, type_, bytes(value), task_path)


def graph_checkpoint_row(
    row: Sequence[Any], writes: tuple[GraphWrite, ...], time: TimeDecoder = driver_time
) -> GraphCheckpointRow:
    """A checkpoint selected as :data:`GRAPH_ROW_COLUMNS`, with its pending ``writes``."""
    thread_id, ns, checkpoint_id, parent, type_, blob, metadata, run_id, created_at = row
    return GraphCheckpointRow(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent,
        type=type_,
        checkpoint=bytes(blob),
        metadata_json=metadata,
        run_id=run_id,
        created_at=time(created_at),
        writes=writes,
    )


@dataclass(frozen=True, slots=True)
class GraphCheckpointQuery:
    """Which checkpoints to list, newest first (by checkpoint id, then thread, namespace).

    None means any. ``metadata`` pairs must all match the stored metadata (a None value also
    matches a missing key, as in LangGraph's savers); ``after`` is the (checkpoint id,
    thread id, namespace) of the last row of the previous page.
    """

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    before_id: str | None = None
    metadata: tuple[tuple[str, Any], ...] = ()
    limit: int | None = None
    after: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class ThreadLease:
    """A lease on a LangGraph thread: while it holds, only writes carrying it (owner and
    current token) may change the thread; a newer token fences this one out."""

    thread_id: str
    owner: str
    token: int
    ttl: timedelta
