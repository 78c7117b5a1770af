"""Records of restart checkpoints and of approvals waiting for a person's decision."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from .._errors import RevisionConflict
from .._json import encode_checked, loads_strict
from ._records import TimeDecoder, driver_time, optional_time

__all__ = [
    "APPROVAL_COLUMNS",
    "APPROVAL_PAYLOADS",
    "APPROVAL_TOPIC",
    "BUDGET_TOPIC",
    "RESTART_COLUMNS",
    "RESTART_PAYLOAD",
    "SPIN_TOPIC",
    "ApprovalRow",
    "NewApproval",
    "RestartRow",
    "approval_id",
    "approval_row",
    "approval_run_id",
    "decision_message",
    "decision_taker",
    "repeated_revision",
    "restart_row",
]

APPROVAL_TOPIC = "zincir.approval"
BUDGET_TOPIC = "zincir.budget"
"""The wait of a run paused because its budget ran out; setting its budget clears it."""
SPIN_TOPIC = "zincir.spin"
"""The wait of a run paused because it spins; acknowledging the spin clears it."""
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


RESTART_COLUMNS: Final = "run_id, checkpoint_id, revision, payload, updated_at"
"""The ``restart_checkpoints`` columns :func:`restart_row` reads, in order."""
RESTART_PAYLOAD: Final = 3
"""The position of ``payload`` among :data:`RESTART_COLUMNS` (sealed in an encrypted store)."""


def restart_row(row: Sequence[Any], time: TimeDecoder = driver_time) -> RestartRow:
    """A restart checkpoint selected as :data:`RESTART_COLUMNS`."""
    run_id, checkpoint_id, revision, payload, updated_at = row
    return RestartRow(run_id, checkpoint_id, int(revision), payload, time(updated_at))


def _canonical(text: str) -> str:
    """One spelling of a JSON value (keys sorted), so key order does not make two payloads
    differ while ``1``, ``1.0`` and ``true`` stay distinct."""
    return json.dumps(loads_strict(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def repeated_revision(stored: RestartRow, revision: int, payload_json: str) -> bool:
    """Whether a save of ``revision`` repeats ``stored`` (same revision, same payload up to
    key order): True, nothing to write; False when it moves the checkpoint forward.
    RevisionConflict when it is older, or diverges from the stored revision."""
    if revision > stored.revision:
        return False
    if revision < stored.revision:
        raise RevisionConflict(
            f"checkpoint {stored.checkpoint_id!r} is at revision {stored.revision}; revision "
            f"{revision} is older: load the checkpoint and continue from there",
            run_id=stored.run_id,
        )
    if stored.payload_json == payload_json or _canonical(stored.payload_json) == _canonical(
        payload_json
    ):
        return True
    raise RevisionConflict(
        f"checkpoint {stored.checkpoint_id!r} already holds revision {stored.revision} with "
        f"another payload; offered revision {revision} diverges from it: save the "
        "next revision instead",
        run_id=stored.run_id,
    )


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
    one was recorded (``decision_json``, an ``ApprovalDecision`` document), with the digest of
    the edited arguments it runs the call with (``edited_args_sha256``, None when it runs the
    model's, ``args_sha256``) and who made it (``decided_by``, None when not said)."""

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
    edited_args_sha256: str | None = None
    decided_by: str | None = None


APPROVAL_COLUMNS: Final = (
    "approval_id, run_id, call_id, tool, arguments, args_sha256, sequence, execution, "
    "requested_at, expires_at, decision, decided_at, edited_args_sha256, decided_by"
)
"""The ``approvals`` columns :func:`approval_row` reads, in order."""
APPROVAL_PAYLOADS: Final = (4, 10)
"""The positions of ``arguments`` and ``decision`` among :data:`APPROVAL_COLUMNS` (sealed in
an encrypted store)."""


def approval_row(row: Sequence[Any], time: TimeDecoder = driver_time) -> ApprovalRow:
    """An ``approvals`` row selected as :data:`APPROVAL_COLUMNS` as an ApprovalRow."""
    aid, run, call, tool, arguments, digest, seq, execution, asked, expires, decision, at = row[:12]
    edited, by = row[12:14]
    return ApprovalRow(
        approval_id=aid,
        run_id=run,
        call_id=call,
        tool=tool,
        arguments_json=arguments,
        args_sha256=digest,
        sequence=int(seq),
        execution=execution,
        requested_at=time(asked),
        expires_at=optional_time(expires, time),
        decision_json=decision,
        decided_at=optional_time(at, time),
        edited_args_sha256=edited,
        decided_by=by,
    )


def decision_message(approval: ApprovalRow) -> str:
    """The body of the ``APPROVAL_TOPIC`` message a decision on ``approval`` sends its run."""
    return encode_checked({"approval_id": approval.approval_id, "call_id": approval.call_id})


def decision_taker(call_id: str, sequence: int) -> str:
    """Who takes the decision messages of call ``call_id`` in the decision round
    ``sequence`` (its approval's sequence): a message is received once per taker."""
    return f"{APPROVAL_TOPIC}:{call_id}:{sequence}"


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
