"""Records of restart checkpoints and of approvals waiting for a person's decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "APPROVAL_TOPIC",
    "ApprovalRow",
    "NewApproval",
    "RestartRow",
    "approval_id",
    "approval_run_id",
]

APPROVAL_TOPIC = "zincir.approval"
"""The topic of the message a decision sends its run (``zincir.agent.APPROVAL_TOPIC``): a run
parked on it becomes claimable once a decision is recorded."""


@dataclass(frozen=True, slots=True)
class RestartRow:
    """One stored restart checkpoint: how far application code consumed a run's replay."""

    run_id: str
    checkpoint_id: str
    revision: int
    payload_json: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class NewApproval:
    """A paused call to open for a decision: the run, the call and the arguments it binds.

    ``execution`` is ``approval`` (approve or deny it) or ``external`` (supply its result);
    ``expires_at`` (None: never) is when an undecided call is denied.
    """

    run_id: str
    call_id: str
    tool: str
    arguments_json: str
    args_sha256: str
    sequence: int
    execution: str
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """An approval as stored: the paused call, since when it waits, and its decision once
    one was recorded (``decision_json``, an ``ApprovalDecision`` document)."""

    approval_id: str
    run_id: str
    call_id: str
    tool: str
    arguments_json: str
    args_sha256: str
    sequence: int
    execution: str
    requested_at: datetime
    expires_at: datetime | None
    decision_json: str | None
    decided_at: datetime | None


def _escaped(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def approval_id(run_id: str, call_id: str) -> str:
    """The id of the approval of call ``call_id`` in run ``run_id``: ``RUN/CALL``.

    ``%`` and ``/`` in each part are escaped (``%25``, ``%2F``), so two different pairs never
    share an id and the id stays readable on a command line.
    """
    return f"{_escaped(run_id)}/{_escaped(call_id)}"


def approval_run_id(approval_id: str) -> str | None:
    """The run id an approval id names (for messages about an unknown approval), or None if
    the text is not shaped like an approval id."""
    run, slash, call = approval_id.partition("/")
    if not (slash and run and call) or "/" in call:
        return None
    return run.replace("%2F", "/").replace("%25", "%")
