"""Durable queues for agent runs: ``Runner.enqueue``'s logic and the serving side (``Queue``
itself lives in ``zincir.runs._queue``, shared with ``ResumeWorker.enqueue``).

``runner.enqueue`` stores a run as ``runner.run`` would (its agent and prompt in its
config, so ``resume`` starts it) but waiting in its queue; ``runner.serve`` admits waiting
runs of its agents within each queue's limits (stored with the queue, so a serving process
need not declare it), then claims them like any other run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import InvalidInput
from .._json import dumps
from .._validate import check_id
from ..runs import ResumeWorker
from ..runs._queue import Queue, store_queued
from ..store import Store
from ._fork import new_run_id

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Queue", "QueueWorker", "enqueue_run"]


async def enqueue_run(
    store: Store,
    agent: Agent,
    prompt: str,
    *,
    queue: Queue,
    key: str | None,
    priority: int,
    run_id: str | None,
    dedupe_id: str | None,
) -> str:
    """Store a run of ``agent`` on ``prompt`` waiting in ``queue``; its id (or the id of the
    run enqueued before in that queue with ``dedupe_id``)."""
    if not isinstance(prompt, str):
        raise InvalidInput("prompt must be a str")
    chosen = new_run_id(agent.name) if run_id is None else check_id(run_id)
    config = {"agent": agent.name, "prompt": prompt, "stream": False}
    return await store_queued(
        store,
        chosen,
        queue,
        name=agent.name,
        provider=agent.model.name,
        config_json=dumps(config),
        key=key,
        priority=priority,
        dedupe_id=dedupe_id,
    )


class QueueWorker(ResumeWorker):
    """A ResumeWorker serving agents: like every ResumeWorker, it admits queued runs of its
    names within their queues' limits (up to its free slots) in the transaction of each
    claim."""
