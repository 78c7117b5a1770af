"""Forking a run from outside any process that runs it: a new run holding the source's
history before a seq, which the next ``Runner.resume``, ``AgentContext.recover``,
``WorkflowContext.open`` or ``ResumeWorker`` continues live from that point."""

from __future__ import annotations

import secrets

from .._errors import InvalidInput
from .._validate import check_id, shown
from ..store import Store, as_store

__all__ = ["fork_id", "fork_run"]


def fork_id(source_run_id: str) -> str:
    """A fresh id for a fork of ``source_run_id``: ``{source}-fork-{8 hex digits}``."""
    return f"{source_run_id}-fork-{secrets.token_hex(4)}"


async def fork_run(
    store: Store, source_run_id: str, /, *, at_seq: int, run_id: str | None = None
) -> str:
    """Fork run ``source_run_id`` before event ``at_seq``: a new run (id ``run_id``, else
    ``{source}-fork-{8 hex}``) holds the source's events with a smaller seq, the records,
    step results, checkpoints, timers and received messages they decided, and nobody owns
    it, so the next resume continues it live from there; the source is only read (a live
    run is forked from its committed log). Returns the new run's id.

    ``at_seq`` runs from 1 (nothing copied) to the source's last seq + 1 (all of it).
    RunNotFound for an unknown source, InvalidInput for a point outside that range,
    RunExists for a taken ``run_id``; nothing is stored then.
    """
    as_store(store)
    source = check_id(source_run_id)
    if isinstance(at_seq, bool) or not isinstance(at_seq, int):
        raise InvalidInput(f"at_seq must be an int, not {shown(at_seq)}", run_id=source)
    new_id = fork_id(source) if run_id is None else check_id(run_id, "the fork's run id")
    record = await store.fork_run(source, at_seq=at_seq, new_run_id=new_id)
    return record["id"]
