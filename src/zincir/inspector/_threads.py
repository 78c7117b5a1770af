"""The inspector's view of one LangGraph thread: its checkpoints, and the pending writes
of each namespace's newest checkpoint, with in-page links from a checkpoint to its parent.

Values are shown by type and size; only ``json`` values are previewed (decoded by the
read-only view from their first bytes), and msgpack, bytes or pickle are never decoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ._db import ROW_LIMIT, Reader

__all__ = ["HEAD_LIMIT", "thread_detail", "thread_url", "with_anchors"]

HEAD_LIMIT = 20  # namespaces whose newest checkpoint (and its pending writes) a page shows
Row = Mapping[str, Any]


def thread_url(thread_id: Any) -> str:
    """The thread page path; the id is percent-encoded so it is only ever a path segment."""
    return "/threads/" + quote(str(thread_id), safe="")


def thread_detail(reader: Reader, summary: Row) -> dict[str, Any]:
    """A thread's summary, its newest checkpoints (every namespace, newest first) and, for
    each namespace, its newest checkpoint with that checkpoint's pending writes."""
    thread_id = str(summary["thread_id"])
    heads = [
        {
            **head,
            "pending_writes": reader.thread_writes(
                thread_id, head["checkpoint_ns"], head["checkpoint_id"], ROW_LIMIT
            ),
        }
        for head in reader.thread_heads(thread_id, HEAD_LIMIT)
    ]
    return {
        "thread": dict(summary),
        "checkpoints": reader.thread_checkpoints(thread_id, ROW_LIMIT),
        "latest": heads,
        "row_limit": ROW_LIMIT,
        "head_limit": HEAD_LIMIT,
    }


def with_anchors(detail: Mapping[str, Any]) -> dict[str, Any]:
    """The detail with in-page anchors (``cp-N``) for checkpoints and their parents, so a
    stored id never becomes part of a URL or an element id."""
    anchors = {
        (c["checkpoint_ns"], c["checkpoint_id"]): f"cp-{index}"
        for index, c in enumerate(detail["checkpoints"])
    }

    def anchored(row: Row) -> dict[str, Any]:
        parent = row.get("parent_checkpoint_id")
        return {
            **row,
            "anchor": anchors.get((row["checkpoint_ns"], row["checkpoint_id"])),
            "parent_anchor": None
            if parent is None
            else anchors.get((row["checkpoint_ns"], parent)),
        }

    return {
        **detail,
        "checkpoints": [anchored(row) for row in detail["checkpoints"]],
        "latest": [anchored(row) for row in detail["latest"]],
    }
