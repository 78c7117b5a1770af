"""The backend-neutral rules of runs and their leases: the events of a status change and
of a claim, why a fenced write or a takeover is refused, and when a run's attempts are
spent. Each backend reads the run's row its own way and asks these."""

from __future__ import annotations

from typing import Any

from .._errors import (
    FencedOut,
    InvalidInput,
    LeaseHeld,
    RunCancelled,
    RunExists,
    RunNotFound,
    RunTerminal,
)
from .._json import dumps, encode_checked
from ._owner import OwnerStatus, owner_status, parse_owner
from ._records import TERMINAL_STATUSES, NewEvent
from ._restart_records import BUDGET_TOPIC, SPIN_TOPIC

__all__ = [
    "attempt_error",
    "attempt_failed",
    "attempts_spent",
    "cancel_refused",
    "cancelled_transition",
    "check_takeover",
    "check_wait_kind",
    "claim_events",
    "fence_error",
    "lease_held_message",
    "operator_event_topic",
    "operator_refused",
    "run_exists_error",
    "run_not_found",
    "terminal_error",
    "transition",
    "version_migrated",
]


def transition(old: str, new: str, **details: object) -> NewEvent:
    """The ``state_transition`` event that accompanies a status change."""
    return NewEvent("state_transition", encode_checked({"from": old, "to": new, **details}))


def terminal_error(run_id: str, status: str, then: str) -> RunTerminal:
    """The error of an action on a finished run: RunCancelled for a cancelled one, so its
    last owner knows to stop; RunTerminal otherwise. ``then`` ends the sentence ("; …" or
    " and …")."""
    if status == "cancelled":
        return RunCancelled(f"the run was cancelled{then}", run_id=run_id)
    return RunTerminal(f"the run is {status}{then}", run_id=run_id)


def run_not_found(run_id: str) -> RunNotFound:
    """The error of a write or read that names no stored run."""
    return RunNotFound(f"no run {run_id!r} in this store", run_id=run_id)


def run_exists_error(run_id: str, hint: str) -> RunExists:
    """The RunExists raised when ``insert_run`` found the id taken."""
    return RunExists(f"a run with this id already exists; {hint}", run_id=run_id)


def fence_error(run_id: str, token: int, row: tuple[Any, ...] | None) -> Exception:
    """Why a write fenced by lease ``token`` matched no row, given the run's stored
    (status, lease_token), or None when the run is gone: missing run, terminal run, or a
    newer owner."""
    if row is None:
        return run_not_found(run_id)
    status, current = row
    if status in TERMINAL_STATUSES:
        return terminal_error(run_id, status, "; nothing more can be written")
    if current != token:
        return FencedOut(
            f"lease token {token} was superseded by {current} (another owner recovered the "
            "run); stop this context, the write was rejected",
            run_id=run_id,
        )
    return FencedOut(
        "this context no longer holds the lease (released or lost); recover the run to write",
        run_id=run_id,
    )


def check_takeover(
    run_id: str, row: tuple[Any, ...] | None, *, live: bool, until: str | None, force: bool
) -> str:
    """The status of a run a new owner may take over, given its stored (status,
    lease_owner) or None: RunNotFound, RunTerminal, or LeaseHeld while another lease is
    ``live`` (until ``until``) and the takeover is not ``force``d. A live lease whose
    owner is a process of this machine that provably died is lapsed: taken over at once."""
    if row is None:
        raise run_not_found(run_id)
    status, holder = row
    if status in TERMINAL_STATUSES:
        raise terminal_error(run_id, status, " and cannot be recovered")
    if not force and holder is not None and live:
        judged = owner_status(holder)
        if judged != "gone":
            raise LeaseHeld(lease_held_message(holder, judged, until), run_id=run_id)
    return str(status)


def lease_held_message(holder: str, judged: OwnerStatus, until: str | None) -> str:
    """Why a live lease of ``holder`` blocks a takeover, and what to do, in the terms of
    where its process runs."""
    identity = parse_owner(holder)
    if identity is not None and judged == "alive":
        return (
            f"a live process on this machine (pid {identity.pid}, owner {holder}) holds the "
            f"lease until {until}; stop that process (a restart then takes the run over at "
            "once), or wait for it to finish or for its lease to expire"
        )
    if identity is not None and judged == "elsewhere":
        return (
            f"a process on another machine ({identity.host}, pid {identity.pid}, owner "
            f"{holder}) holds a live lease until {until}; wait for it to expire, or "
            "force_recover once that process is confirmed dead"
        )
    return (
        f"owner {holder} holds a live lease until {until}; wait for it to expire, "
        "or force_recover once that process is confirmed dead"
    )


def check_wait_kind(kind: str | None) -> None:
    """InvalidInput unless ``kind`` is a wait a run can record (or None: no wait)."""
    if kind not in (None, "timer", "message", "child"):
        raise InvalidInput(f"a run waits on a timer, a message or a child, not {kind!r}")


def attempts_spent(attempts: int, max_attempts: int | None) -> bool:
    """Whether a run that made ``attempts`` may not be attempted again."""
    return max_attempts is not None and attempts >= max_attempts


def attempt_error(attempts: int, last_error: str | None) -> str:
    """The error a run whose attempts are spent fails with: its last one, if recorded."""
    return last_error or (
        f"attempt {attempts} ended without completing the run (crashed or returned)"
    )


def claim_events(status: str, owner: str, attempt: int, token: int) -> list[NewEvent]:
    """The events of a claim of a run that was ``status``: its start (a pending run's
    transition) and ``run_claimed``."""
    events = [transition("pending", "running")] if status == "pending" else []
    events.append(
        NewEvent(
            "run_claimed",
            encode_checked({"worker": owner, "attempt": attempt, "lease_token": token}),
        )
    )
    return events


def attempt_failed(attempts: int, error: str, retry_at: str | None) -> NewEvent:
    """The ``attempt_failed`` event of an attempt retried at ``retry_at`` (stored text)."""
    payload: dict[str, Any] = {"attempt": attempts, "error": error, "retry_at": retry_at}
    return NewEvent("attempt_failed", dumps(payload))


def version_migrated(old: str | None, new: str) -> NewEvent:
    """The ``version_migrated`` event of a run moved from app version ``old`` to ``new``."""
    return NewEvent("version_migrated", encode_checked({"from": old, "to": new}))


def cancelled_transition(old: str, reason: str | None, by: str | None) -> NewEvent:
    """The ``state_transition`` to ``cancelled``: why (``reason``) and, for a run cancelled
    with its parent, the run whose cancellation reached it (``by``)."""
    details: dict[str, object] = {}
    if reason is not None:
        details["reason"] = reason
    if by is not None:
        details["cancelled_with"] = by
    return NewEvent("state_transition", dumps({"from": old, "to": "cancelled", **details}))


def cancel_refused(run_id: str, status: str | None) -> Exception | None:
    """Why run ``run_id`` (stored ``status``, None when absent) cannot be cancelled: it is
    missing, or it already finished; None when it can be (or already is cancelled)."""
    if status is None:
        return run_not_found(run_id)
    if status in ("completed", "failed"):
        return terminal_error(run_id, status, "; only a live run can be cancelled")
    return None


def operator_refused(run_id: str, status: str | None) -> Exception | None:
    """Why run ``run_id`` (stored ``status``, None when absent) cannot take an operator's
    event: it is missing or finished; None when it is live."""
    if status is None:
        return run_not_found(run_id)
    if status in TERMINAL_STATUSES:
        return terminal_error(run_id, status, "; nothing more can be written")
    return None


_OPERATOR_EVENTS = {"budget_set": BUDGET_TOPIC, "spin_acknowledged": SPIN_TOPIC}


def operator_event_topic(kind: str, run_id: str) -> str:
    """The wait an operator's event of type ``kind`` ends; InvalidInput for any other
    event (only these may be written to a run's log by someone other than its owner)."""
    topic = _OPERATOR_EVENTS.get(kind)
    if topic is None:
        raise InvalidInput(
            f"{kind!r} is not an event an operator may add to a run's log "
            f"(one of {sorted(_OPERATOR_EVENTS)})",
            run_id=run_id,
        )
    return topic
