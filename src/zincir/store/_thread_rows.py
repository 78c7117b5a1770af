"""The LangGraph thread rows of the read-only view, as every backend returns them, and
the preview of a value's head (only a ``json`` value is ever read, let alone decoded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypedDict

from .._encryption import MAGIC
from .._json import StrictJsonError, loads_strict

__all__ = [
    "MAX_NAMESPACES",
    "PREVIEW_BYTES",
    "ThreadCheckpointRow",
    "ThreadHeadRow",
    "ThreadRow",
    "ThreadWriteRow",
    "plain_size",
    "preview",
    "thread_row",
]

MAX_NAMESPACES: Final = 50  # namespaces named per thread summary (all are counted)
PREVIEW_BYTES: Final = 65_536  # the head of a json value read for its preview
_SEALING_ADDS: Final = 3 + 1 + 12 + 16 + 1
"""What sealing adds to a bytes value besides its key id: ``zs1``, the key id's length, the
nonce, the tag and the byte saying it is bytes (see ``zincir._encryption``; bytes are never
compressed)."""


class ThreadRow(TypedDict):
    """A LangGraph thread: how many checkpoints in which namespaces (the first 50 by name),
    its newest checkpoint with that checkpoint's pending writes, and its lease (owner and
    expiry None when nobody holds it)."""

    thread_id: str
    checkpoints: int
    namespace_count: int
    namespaces: list[str]
    latest_checkpoint_ns: str
    latest_checkpoint_id: str
    latest_created_at: str
    pending_writes: int
    lease_owner: str | None
    lease_token: int | None
    lease_expires_at: str | None


class ThreadCheckpointRow(TypedDict):
    """A LangGraph checkpoint without its value: the value's type tag and size in bytes, the
    metadata decoded, and how many pending writes its tasks stored."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    run_id: str | None
    type: str
    size: int
    metadata: Any
    created_at: str
    writes: int


class ThreadHeadRow(ThreadCheckpointRow):
    """A namespace's newest checkpoint with a preview of its value (see ThreadWriteRow)."""

    preview: Any
    preview_kind: str


class ThreadWriteRow(TypedDict):
    """A pending write of a task. Only a ``json`` value is read: ``preview_kind`` is
    ``json`` when ``preview`` is the decoded value, ``text`` when it is the head of a value
    too long (or not strict JSON) to decode, ``none`` for every other type (msgpack, bytes,
    null), which is never read, let alone deserialized."""

    task_id: str
    idx: int
    channel: str
    type: str
    size: int
    task_path: str
    created_at: str
    preview: Any
    preview_kind: str


def thread_row(
    thread_id: str,
    counts: Sequence[Any],
    namespaces: list[str],
    latest: Sequence[Any],
    pending_writes: int,
    lease: Sequence[Any] | None,
) -> ThreadRow:
    """A thread's summary from its (checkpoints, namespace count), its newest checkpoint's
    (namespace, id, created_at as text) and its lease's (owner, token, expires_at as text)
    if it has a lease row."""
    count, namespace_count = counts
    latest_ns, latest_id, latest_at = latest
    owner, token, expires_at = lease if lease is not None else (None, None, None)
    return {
        "thread_id": thread_id,
        "checkpoints": int(count),
        "namespace_count": int(namespace_count),
        "namespaces": namespaces,
        "latest_checkpoint_ns": str(latest_ns),
        "latest_checkpoint_id": str(latest_id),
        "latest_created_at": str(latest_at),
        "pending_writes": pending_writes,
        "lease_owner": owner,
        "lease_token": token,
        "lease_expires_at": expires_at,
    }


def preview(row: dict[str, Any], limit: int) -> None:
    """Replace ``row["head"]`` (the first ``limit`` bytes of a ``json`` value, or None) by
    ``preview`` and ``preview_kind`` (see ThreadWriteRow)."""
    head = row.pop("head")
    if row["type"] != "json" or head is None:
        row["preview"], row["preview_kind"] = None, "none"
        return
    data = head.encode("utf-8", "surrogatepass") if isinstance(head, str) else bytes(head)
    if int(row["size"]) <= limit:
        try:
            row["preview"], row["preview_kind"] = loads_strict(data.decode("utf-8")), "json"
            return
        except (UnicodeDecodeError, StrictJsonError):
            pass
    row["preview"], row["preview_kind"] = data[:limit].decode("utf-8", "replace"), "text"


def plain_size(size: int, envelope: object) -> int:
    """A LangGraph value's size before sealing, from its stored ``size`` and first four bytes
    (``size`` itself for a value that is not sealed)."""
    head = envelope.tobytes() if isinstance(envelope, memoryview) else envelope
    if not isinstance(head, bytes) or len(head) < 4 or not head.startswith(MAGIC):
        return size
    return size - _SEALING_ADDS - head[3]
