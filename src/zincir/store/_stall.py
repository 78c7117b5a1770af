"""Why a live run is not moving, and when it will next act: read from its row (its wait,
backoff, lease and version) and whether the message it waits for has arrived, the same way
on every backend."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from .._time import to_db
from ._queues import QUEUE_TOPIC
from ._rate_limits import RATE_LIMIT_REF
from ._records import TERMINAL_STATUSES, RunRecord
from ._restart_records import APPROVAL_TOPIC, BUDGET_TOPIC, SPIN_TOPIC

__all__ = ["StallReason", "stall_reason"]

KINDS: Final = (
    "running",
    "timer",
    "message",
    "approval",
    "woken",
    "budget",
    "spin",
    "child",
    "backoff",
    "pending",
    "unclaimed",
    "rate_limit",
    "queue",
)


@dataclass(frozen=True, slots=True)
class StallReason:
    """``kind`` (one of ``KINDS``), a sentence saying why, and when the run will next act
    by itself (stored time text; None when it waits for something else to happen)."""

    kind: str
    text: str
    next_at: str | None = None


def stall_reason(
    run: RunRecord, now: datetime, *, arrived: bool = False, queued: str | None = None
) -> StallReason | None:
    """Why run ``run`` is where it is at ``now``; None for a finished run. ``arrived`` says
    the message it waits for is there (a decided approval's among them): it waits for no
    one, only to be resumed. ``queued``: the limit holding a run waiting in its queue."""
    if run["status"] in TERMINAL_STATUSES:
        return None
    version = run["app_version"]
    worker = "a ResumeWorker" + (f" that serves app version {version}" if version else "")
    stamp = to_db(now)
    owner, expires = run["lease_owner"], run["lease_expires_at"]
    held = owner is not None and expires is not None and expires > stamp
    holder = f"; held by {owner} until {expires}" if held else ""
    kind, ref, until = run["wait_kind"], run["wait_ref"], run["wait_until"]
    deadline = f" (or until {until})" if until else ""
    if kind == "message" and arrived:
        what = "a person decided" if ref == APPROVAL_TOPIC else f"a message on {ref!r} arrived"
        return StallReason("woken", f"{what}: waiting for {worker} to resume it{holder}", None)
    if kind == "timer" and ref is not None and ref.startswith(RATE_LIMIT_REF):
        return rate_limit_stall(ref, until, holder)
    if kind == "timer":
        return StallReason("timer", f"waiting on a timer until {until}{holder}", until)
    if kind == "message" and ref == QUEUE_TOPIC and run["status"] == "pending":
        limit = f": held by its queue's {queued}" if queued else ""
        return StallReason("queue", f"waiting in its queue{limit}", None)
    if kind == "message" and ref == BUDGET_TOPIC:
        text = f"paused: its budget ran out (zincir.set_budget raises it){holder}"
        return StallReason("budget", text, None)
    if kind == "message" and ref == SPIN_TOPIC:
        text = f"paused: it was spinning (zincir.acknowledge_spin lets it go on){holder}"
        return StallReason("spin", text, None)
    if kind == "message" and ref == APPROVAL_TOPIC:
        text = f"waiting for a person to decide a paused call{deadline}{holder}"
        return StallReason("approval", text, until)
    if kind == "message":
        return StallReason("message", f"waiting for a message on {ref!r}{deadline}{holder}", until)
    if kind == "child":
        return StallReason("child", f"waiting for child run {ref} to finish{holder}", until)
    retry_at = run["next_attempt_at"]
    if retry_at is not None and retry_at > stamp and not held:
        attempt = f"attempt {run['attempts']}"
        ended = (
            f"{attempt} failed ({run['last_error']})"
            if run["last_error"]
            else f"{attempt} ended without finishing the run"
        )
        text = f"backing off after {ended} until {retry_at}"
        return StallReason("backoff", text, retry_at)
    if held:
        text = f"running: held by {owner} until {expires} (claimable then if that owner died)"
        return StallReason("running", text, expires)
    if run["status"] == "pending":
        return StallReason("pending", f"not started: waiting for {worker} to claim it", None)
    return StallReason("unclaimed", f"no live owner: waiting for {worker} to claim it", None)


def rate_limit_stall(ref: str, until: str | None, holder: str) -> StallReason:
    """A run whose model request waits for capacity of a shared provider rate limit."""
    key = ref.removeprefix(RATE_LIMIT_REF)
    return StallReason("rate_limit", f"waiting for rate limit {key} until {until}{holder}", until)
