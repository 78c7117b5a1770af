"""Durable messages between runs (signals, human approvals).

Sends are keyed: a run's n-th send to (recipient, topic) has a deterministic key, so a send
replayed after a crash finds its stored message instead of adding another. A receive takes
the oldest unreceived message of its topic under its own key (a topic's n-th receive, or
the caller's key), so each message is delivered to one receive of its run and a replayed
receive returns the same message. A receive timeout is a stored deadline, like a sleep.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .._json import dumps
from .._validate import check_duration, check_id
from ..store import ReceivedMessage, Store, as_store
from ._core import Core

__all__ = ["ReceivedMessage", "receive", "send_from_run", "send_message"]


async def send_message(
    store: Store, to_run_id: str, topic: str, payload: Any, *, key: str | None = None
) -> int:
    """Send from outside any run (e.g. a human approval); returns the message id.

    With ``key``, repeating the send (a retried request) returns the first message's id.
    """
    as_store(store)
    check_id(to_run_id)
    check_id(topic, "a topic", run_id=to_run_id)
    if key is not None:
        check_id(key, "a send key", run_id=to_run_id)
    body = dumps(payload, what=f"the payload of message {topic!r}", run_id=to_run_id)
    return await store.send_message(to_run_id, topic, body, key=key)


async def send_from_run(
    core: Core, to_run_id: str, topic: str, payload: Any, key: str | None
) -> int:
    """A fenced send from the workflow's run, deduplicated by its deterministic key."""
    run_id = core.run_id
    check_id(to_run_id, run_id=run_id)
    check_id(topic, "a topic", run_id=run_id)
    if key is None:
        send_key = dumps(["send", to_run_id, topic, core.next_count("send", to_run_id, topic)])
    else:
        send_key = check_id(key, "a send key", run_id=run_id)
    body = dumps(payload, what=f"the payload of message {topic!r}", run_id=run_id)
    core.check()
    return await core.store.send_from_run(core.lease, to_run_id, topic, body, send_key=send_key)


async def receive(
    core: Core, topic: str, timeout: timedelta | float | None, key: str | None
) -> ReceivedMessage | None:
    """Take the next message on ``topic`` for this run; None once the stored deadline passes."""
    run_id = core.run_id
    check_id(topic, "a topic", run_id=run_id)
    limit = (
        None
        if timeout is None
        else check_duration(timeout, f"the timeout of recv {topic!r}", run_id=run_id)
    )
    if key is None:
        recv_key = f"{topic}#{core.next_count('recv', topic)}"  # n after the last '#'
    else:
        recv_key = check_id(key, "a receive key", run_id=run_id)
    store, lease = core.store, core.lease
    replayed = await store.replayed_receive(run_id, recv_key)
    if replayed is not None:
        return replayed.value
    return await core.block(
        "message",
        topic,
        lambda: store.receive_attempt(lease, topic, recv_key, limit),
        lambda: store.message_ready(run_id, topic),
    )
