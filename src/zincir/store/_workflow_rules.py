"""The backend-neutral rules of workflow steps and waits: the events a step, a timer, a
message or a child run logs, the timer that bounds a receive, and the refusals of a send,
a spawn or a step result whose claim was released."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .._errors import InvalidInput, RunExists, RunNotFound, StepInProgress
from .._json import encode_checked, encode_part, loads_strict
from .._time import to_db
from ._records import NewEvent
from ._workflow_records import ReceivedMessage

__all__ = [
    "child_not_found",
    "child_spawned",
    "message_received",
    "message_sent",
    "receive_deadline",
    "recipient_not_found",
    "same_message",
    "spawn_taken",
    "step_claim_released",
    "step_completed",
    "step_result",
    "timer_fired",
    "timer_set",
]

_DEADLINE = "zincir.recv:"  # the timer of a receive's deadline: this prefix + its key


def receive_deadline(recv_key: str) -> str:
    """The name of the timer that bounds receive ``recv_key``."""
    return _DEADLINE + recv_key


def step_completed(name: str, result_json: str) -> NewEvent:
    """The ``step_completed`` event of step ``name``, which carries its result: composed
    around the result's JSON text as stored (never encoded again)."""
    return NewEvent("step_completed", f'{{"name":{encode_part(name)},"result":{result_json}}}')


def step_result(payload: str) -> Any:
    """The result a ``step_completed`` event's payload carries."""
    return loads_strict(payload)["result"]


def timer_set(name: str, wake_at: datetime) -> NewEvent:
    """The ``timer_set`` event of timer ``name``, due at ``wake_at``."""
    return NewEvent("timer_set", encode_checked({"name": name, "wake_at": to_db(wake_at)}))


def timer_fired(name: str, event: str, details: Mapping[str, Any] | None = None) -> NewEvent:
    """The ``event`` (``timer_completed``, ``recv_timed_out``) logged when timer ``name``
    fires, with ``details``."""
    return NewEvent(event, encode_checked({"name": name, **(details or {})}))


def message_sent(to_run_id: str, topic: str, send_key: str, message_id: int) -> NewEvent:
    """The ``message_sent`` event of a send from a run."""
    event = {"to": to_run_id, "topic": topic, "key": send_key, "message_id": message_id}
    return NewEvent("message_sent", encode_checked(event))


def message_received(topic: str, recv_key: str, message: ReceivedMessage) -> NewEvent:
    """The ``message_received`` event of receive ``recv_key`` taking ``message``."""
    event = {"topic": topic, "key": recv_key, "message_id": message.id, "from": message.from_run_id}
    return NewEvent("message_received", encode_checked(event))


def recipient_not_found(topic: str, to_run_id: str) -> RunNotFound:
    """The error of a send to a run that is not stored."""
    return RunNotFound(
        f"cannot send {topic!r}: no run {to_run_id!r} in this store", run_id=to_run_id
    )


def same_message(found: Sequence[Any], to_run_id: str, topic: str, key: str) -> int:
    """The id of the stored message (id, to_run_id, topic) a keyed send repeats;
    InvalidInput if ``key`` sent another topic or to another run."""
    mid, to, stored_topic = found
    if (to, stored_topic) != (to_run_id, topic):
        raise InvalidInput(
            f"send key {key!r} already sent {stored_topic!r} to run {to!r}; "
            "use a distinct key for each message",
            run_id=to_run_id,
        )
    return int(mid)


def child_not_found(child_id: str) -> RunNotFound:
    """The error of a join on a run that is not stored."""
    return RunNotFound(f"cannot join: no run {child_id!r} in this store", run_id=child_id)


def child_spawned(spawn_name: str, child_id: str) -> NewEvent:
    """The ``child_spawned`` event of spawn ``spawn_name``."""
    return NewEvent("child_spawned", encode_checked({"name": spawn_name, "child_id": child_id}))


def spawn_taken(spawn_name: str, child_id: str, run_id: str) -> RunExists:
    """The error of a spawn whose child id another run already has."""
    return RunExists(
        f"cannot spawn {spawn_name!r}: a run {child_id!r} already exists; choose "
        "another run_id or omit it",
        run_id=run_id,
    )


def step_claim_released(run_id: str, name: str) -> StepInProgress:
    """Why the result of step ``name`` was not stored: its claim was released meanwhile."""
    return StepInProgress(
        f"the claim on step {name!r} was released (recover()) while its body ran; "
        "its result was not stored",
        run_id=run_id,
    )
