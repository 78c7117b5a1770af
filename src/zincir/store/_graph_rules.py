"""The backend-neutral rules of the LangGraph tables: who may write a thread (the refusals
of a fence and of a lease taken over), which lease fences which thread, what a copy may not
overwrite, and the values a checkpoint or a task's writes bind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import FencedOut, InvalidInput, LeaseHeld
from ._langgraph_records import GraphWrite, NewGraphCheckpoint, ThreadLease

__all__ = [
    "checkpoint_params",
    "copy_refused",
    "lease_for",
    "lease_held",
    "thread_fenced_out",
    "write_params",
]


def lease_held(
    thread_id: str, owner: object, token: object, until: str | None, *, taking: bool
) -> LeaseHeld:
    """The refusal of a write without a lease (or, ``taking``, of an acquire without
    ``force``) while ``owner``'s lease on the thread is live until ``until``."""
    advice = (
        "wait for it to expire or take it over with force=True"
        if taking
        else "write through the saver that holds it (saver.fenced), or wait for the lease to expire"
    )
    return LeaseHeld(
        f"thread {thread_id!r} is leased by {owner} (token {token}) until {until}; {advice}"
    )


def thread_fenced_out(
    thread_id: str, lease: ThreadLease, stored: Sequence[Any] | None
) -> FencedOut:
    """Why ``lease`` no longer holds its thread, given the thread's stored (owner, token):
    a newer token, or released."""
    if stored is not None and stored[1] != lease.token:
        return FencedOut(
            f"thread {thread_id!r}: lease token {lease.token} was superseded by {stored[1]} "
            f"(held by {stored[0] or 'nobody now'}); stop writing this thread, the write was "
            "rejected"
        )
    return FencedOut(
        f"thread {thread_id!r}: this lease (token {lease.token}) was released or never "
        "taken; take the thread again (saver.fenced) to write"
    )


def lease_for(thread_id: str, leases: Sequence[ThreadLease]) -> ThreadLease | None:
    """The lease among ``leases`` that fences writes to ``thread_id``, if any."""
    return next((lease for lease in leases if lease.thread_id == thread_id), None)


def copy_refused(source_thread_id: str, target_thread_id: str, *, target_taken: bool) -> None:
    """InvalidInput for a copy of a thread onto itself, or onto a thread that has
    checkpoints (``target_taken``)."""
    if source_thread_id == target_thread_id:
        raise InvalidInput(f"cannot copy thread {source_thread_id!r} onto itself")
    if target_taken:
        raise InvalidInput(
            f"thread {target_thread_id!r} already has checkpoints; delete it first "
            "or copy to a new thread id"
        )


def checkpoint_params(item: NewGraphCheckpoint) -> tuple[Any, ...]:
    """A checkpoint's values in ``langgraph_checkpoints`` column order (thread_id,
    checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, checkpoint, metadata)."""
    return (
        item.thread_id,
        item.checkpoint_ns,
        item.checkpoint_id,
        item.parent_checkpoint_id,
        item.run_id,
        item.type,
        item.checkpoint,
        item.metadata_json,
    )


def write_params(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, writes: Sequence[GraphWrite]
) -> list[tuple[bool, tuple[Any, ...]]]:
    """Each write's values in ``langgraph_writes`` column order (up to task_path), and
    whether it replaces a stored write at its (task, idx): a special channel's (idx < 0)
    does, any other is kept."""
    return [
        (
            w.idx < 0,
            (
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                w.task_id,
                w.idx,
                w.channel,
                w.type,
                w.value,
                w.task_path,
            ),
        )
        for w in writes
    ]
