"""Spin detection: an agent that loops without progress, read from its run's log. Three
rules: the same tool call (name and argument digest) repeated, the same model response
repeated in a row, and model rounds without an accepted checkpoint. What a detection does is
the rules' ``action``: ``warn`` (a ``spin_detected`` event, once per finding), ``pause``
(parked until :func:`acknowledge_spin`) or ``fail``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from .._errors import InvalidInput, SpinDetected
from .._json import dumps
from .._validate import check_id, int_problem, shown
from ..store import Event, Store, as_store

__all__ = [
    "ACKNOWLEDGED_EVENT",
    "SPIN_EVENT",
    "SpinRules",
    "SpinTracker",
    "acknowledge_spin",
]

SPIN_EVENT: Final = "spin_detected"
ACKNOWLEDGED_EVENT: Final = "spin_acknowledged"


@dataclass(frozen=True, slots=True)
class SpinRules:
    """When a run counts as spinning (None turns a rule off) and what then happens."""

    repeated_call: int | None = 3
    repeated_response: int | None = 3
    rounds_without_checkpoint: int | None = None
    action: Literal["warn", "pause", "fail"] = "warn"

    def __post_init__(self) -> None:
        for name, minimum in (
            ("repeated_call", 2),
            ("repeated_response", 2),
            ("rounds_without_checkpoint", 1),
        ):
            value = getattr(self, name)
            problem = None if value is None else int_problem(name, value, minimum=minimum)
            if problem is not None:
                raise InvalidInput(f"SpinRules: {problem}")
        if self.action not in ("warn", "pause", "fail"):
            raise InvalidInput(
                f"SpinRules: action must be 'warn', 'pause' or 'fail', not {shown(self.action)}"
            )


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class SpinTracker:
    """The counts the rules judge, folded from the run's log (reset by an acknowledgement)."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    last_response: str | None = None
    streak: int = 0
    rounds: int = 0
    accepted: int = 0  # checkpoints accepted so far: each starts a new count of rounds
    reported: set[str] = field(default_factory=set)

    def fold(self, events: Iterable[Event]) -> None:
        for event in events:
            payload = event.payload if isinstance(event.payload, dict) else {}
            if event.type == "llm_call":
                calls = [
                    [call.get("name"), call.get("arguments")]
                    for call in payload.get("tool_calls") or []
                    if isinstance(call, Mapping)
                ]
                digest = _digest([payload.get("content"), calls])
                self.streak = self.streak + 1 if digest == self.last_response else 1
                self.last_response = digest
                self.rounds += 1
            elif event.type == "tool_call":
                key = (str(payload.get("name")), _digest(payload.get("arguments")))
                self.calls[key] = self.calls.get(key, 0) + 1
            elif event.type == "checkpoint_accepted":
                self.rounds = 0
                self.accepted += 1
            elif event.type == SPIN_EVENT:
                self.reported.add(str(payload.get("finding")))
            elif event.type == ACKNOWLEDGED_EVENT:
                self.calls.clear()
                self.last_response, self.streak, self.rounds = None, 0, 0
                self.reported.clear()

    def finding(self, rules: SpinRules, run_id: str) -> SpinDetected | None:
        """The first rule the run breaks, with its evidence; None while it makes progress."""
        if rules.repeated_call is not None and self.calls:
            (name, args), times = max(self.calls.items(), key=lambda item: item[1])
            if times >= rules.repeated_call:
                evidence = {"tool": name, "args_sha256": args, "times": times}
                return SpinDetected("repeated_call", f"call:{name}:{args}", evidence, run_id=run_id)
        if rules.repeated_response is not None and self.streak >= rules.repeated_response:
            evidence = {"response_sha256": self.last_response, "times": self.streak}
            finding = f"response:{self.last_response}"
            return SpinDetected("repeated_response", finding, evidence, run_id=run_id)
        limit = rules.rounds_without_checkpoint
        if limit is not None and self.rounds >= limit:
            evidence = {"rounds": self.rounds, "limit": limit}
            finding = f"rounds:{self.accepted}"
            return SpinDetected("rounds_without_checkpoint", finding, evidence, run_id=run_id)
        return None


async def acknowledge_spin(store: Store, run_id: str, note: str | None = None) -> int:
    """Tell a spinning run to go on: a ``spin_acknowledged`` event resets its counts, and a
    run paused for spinning becomes claimable again. Returns the event's seq."""
    as_store(store)
    check_id(run_id)
    if note is not None and not isinstance(note, str):
        raise InvalidInput(f"note must be text, not {shown(note)}", run_id=run_id)
    body = dumps({"note": note}, what="a spin acknowledgement", run_id=run_id)
    return await store.append_operator_event(run_id, ACKNOWLEDGED_EVENT, body)
