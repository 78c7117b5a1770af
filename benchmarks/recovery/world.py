"""What lives outside every agent's store: the ledger, the artifacts, the meter, the model.

Standard library only, so the peers (LangGraph, DBOS) import it from their own virtualenv
and every system runs the same task against the same world:

- the **ledger**, an external service in its own SQLite file: ``apply(key, subtask)`` applies
  a subtask's effect once per idempotency key and logs every call (which process, when);
- the **artifacts**, one file per finished subtask, which the verifier reads;
- the **meter**, an append-only JSON-lines file of model requests (simulated tokens, context
  size) and checkpoint audits, written with one ``write`` each so a SIGKILL loses none;
- the **scripted model**: it reads the context it is sent, asks for the lowest subtask the
  context does not show done (with a fresh random tool call id, as a real model would),
  claims progress every ``every`` subtasks, and charges tokens for the context it was sent;
- the **kill switch**: SIGKILL of this process at one named point of the task.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KILL_ENV",
    "PHASES",
    "Artifacts",
    "KillSwitch",
    "Ledger",
    "Meter",
    "ScriptedModel",
    "Task",
    "audit_claim",
    "do_subtask",
    "last_tool_index",
    "progress",
    "remaining",
    "system_message",
]

KILL_ENV = "RECOVERY_KILL_AT"
PHASES = ("responded", "effect", "artifact", "recorded")
"""Where a subtask's process may be killed: the model asked for it, its effect is applied,
its artifact is written, its result is recorded. ``verified`` (the verifier decided, the
decision is not stored) is a fifth point, at subtasks that end a checkpoint round."""
OUTPUT_TOKENS = 25
CHARS_PER_TOKEN = 4
LATENCY_S = 0.002
LATENCY_PER_TOKEN_S = 0.5e-6


@dataclass(frozen=True)
class Task:
    """``subtasks`` subtasks, progress claimed every ``every``; a ``liar`` agent sometimes
    claims one subtask more than it did."""

    subtasks: int = 40
    every: int = 5
    liar: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"subtasks": self.subtasks, "every": self.every, "liar": self.liar}


def system_message(task: Task) -> dict[str, Any]:
    """The first message of every context: the task."""
    return {
        "role": "system",
        "content": (
            f"Complete subtasks 0 to {task.subtasks - 1} of the migration, one tool call "
            "each (do_subtask with the subtask's index). Every "
            f"{task.every} subtasks, claim the verified progress so far; the verifier checks "
            "each claimed subtask's artifact. Answer 'done' when every subtask is done."
        ),
    }


def remaining(task: Task, completed: Sequence[int]) -> list[int]:
    """The subtasks not in ``completed``."""
    done = set(completed)
    return [i for i in range(task.subtasks) if i not in done]


def progress(messages: Sequence[dict[str, Any]]) -> tuple[set[int], int]:
    """What a context shows done (tool results and accepted claims) and how many tool
    results came since the last checkpoint decision."""
    done: set[int] = set()
    since = 0
    for message in messages:
        role = message["role"]
        if role == "summary":
            done |= set(message["completed"])
            since = 0
        elif role == "tool":
            done.add(message["index"])
            since += 1
        elif role == "checkpoint":
            if message["accepted"]:
                done |= set(message["completed"])
            since = 0
    return done, since


def last_tool_index(messages: Sequence[dict[str, Any]]) -> int:
    """The subtask of the context's latest tool result (else its highest done subtask)."""
    for message in reversed(messages):
        if message["role"] == "tool":
            return int(message["index"])
    return max(progress(messages)[0], default=-1)


class Meter:
    """Append-only JSON lines: one ``write`` per line, so a killed process loses none."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "pid": os.getpid(), "at": time.monotonic(), **fields})
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def read_meter(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every line a run's processes wrote to the meter."""
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


class Ledger:
    """An external service: each idempotency key's effect applied once, every call logged.

    A repeated key is answered with the first effect's value; a new key for a subtask that
    already has an effect is a duplicate external effect (what a restart from scratch does,
    since the model hands out a fresh tool call id each time it is asked)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        # check_same_thread off: a peer may run the tool on its own worker thread (one at a time).
        self._conn = sqlite3.connect(
            path, isolation_level=None, timeout=30, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, subtask INTEGER NOT NULL,"
            " value TEXT NOT NULL, at REAL NOT NULL, pid INTEGER NOT NULL)"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL, subtask INTEGER NOT NULL,"
            " at REAL NOT NULL, pid INTEGER NOT NULL)"
        )

    def apply(self, key: str, subtask: int) -> str:
        """Apply subtask ``subtask``'s effect under ``key`` unless applied before; its value."""
        now, pid = time.monotonic(), os.getpid()
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.execute(
                "INSERT INTO calls (key, subtask, at, pid) VALUES (?, ?, ?, ?)",
                (key, subtask, now, pid),
            )
            self._conn.execute(
                "INSERT OR IGNORE INTO effects (key, subtask, value, at, pid) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, subtask, uuid.uuid4().hex, now, pid),
            )
            (value,) = self._conn.execute(
                "SELECT value FROM effects WHERE key = ?", (key,)
            ).fetchone()
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return str(value)

    def effects(self) -> list[tuple[str, int, str, float, int]]:
        """Every applied effect: (key, subtask, value, at, pid), oldest first."""
        return list(
            self._conn.execute("SELECT key, subtask, value, at, pid FROM effects ORDER BY at")
        )

    def calls(self) -> list[tuple[str, int, float, int]]:
        """Every call, applied or answered again: (key, subtask, at, pid)."""
        return list(self._conn.execute("SELECT key, subtask, at, pid FROM calls ORDER BY at"))

    def done(self) -> set[int]:
        """The subtasks with at least one effect."""
        return {row[0] for row in self._conn.execute("SELECT DISTINCT subtask FROM effects")}

    def close(self) -> None:
        self._conn.close()


class Artifacts:
    """One JSON file per finished subtask, published by rename."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, subtask: int) -> Path:
        return self.folder / f"subtask-{subtask:04d}.json"

    def write(self, subtask: int, effect: str) -> str:
        target = self.path(subtask)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps({"subtask": subtask, "effect": effect}))
        os.replace(temporary, target)
        return target.name

    def read(self, subtask: int) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.path(subtask).read_text()))
        except (OSError, ValueError):
            return None

    def verify(self, claimed: Sequence[int]) -> tuple[bool, dict[str, Any]]:
        """Whether every claimed subtask has its artifact; the evidence (what is missing)."""
        missing = [
            index
            for index in claimed
            if (found := self.read(index)) is None
            or found.get("subtask") != index
            or not found.get("effect")
        ]
        return not missing, {"checked": len(claimed), "missing": missing}


def audit_claim(ledger: Ledger, claimed: Sequence[int]) -> list[int]:
    """Ground truth, whatever the verifier said: the claimed subtasks with no effect yet."""
    done = ledger.done()
    return [index for index in claimed if index not in done]


class KillSwitch:
    """SIGKILL of this process at ``RECOVERY_KILL_AT=subtask:phase``, on its first hit."""

    def __init__(self, value: str | None = None) -> None:
        value = os.environ.get(KILL_ENV, "") if value is None else value
        self.target: tuple[int, str] | None = None
        if value:
            subtask, _, phase = value.partition(":")
            self.target = (int(subtask), phase)

    def point(self, subtask: int, phase: str) -> None:
        if self.target == (subtask, phase):
            os.kill(os.getpid(), signal.SIGKILL)


def do_subtask(
    ledger: Ledger, artifacts: Artifacts, kill: KillSwitch, call_id: str, subtask: int
) -> dict[str, Any]:
    """The tool: the external effect under the call id (the idempotency key), then the
    artifact; the result the agent records."""
    effect = ledger.apply(call_id, subtask)
    kill.point(subtask, "effect")
    artifact = artifacts.write(subtask, effect)
    kill.point(subtask, "artifact")
    return {"index": subtask, "effect": effect, "artifact": artifact}


class ScriptedModel:
    """The model: decides from the context alone and charges tokens for it.

    Each request costs ``len(json(context)) / 4`` input tokens plus a fixed answer, and
    takes 2 ms plus 0.5 ms per 1,000 tokens. Every ``every`` tool results it claims the
    progress its context shows (a liar adds the next undone subtask at every third claim);
    after a rejected claim it claims again honestly; with every subtask shown done it
    answers ``done``; else it asks for the lowest subtask not shown done."""

    def __init__(self, task: Task, meter: Meter) -> None:
        self.task = task
        self.meter = meter

    def respond(self, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        context_tokens = len(json.dumps(list(messages))) // CHARS_PER_TOKEN
        tokens = context_tokens + OUTPUT_TOKENS
        time.sleep(LATENCY_S + tokens * LATENCY_PER_TOKEN_S)
        response = self._decide(messages)
        kind = next(iter(response))
        self.meter.write("request", tokens=tokens, context_tokens=context_tokens, answer=kind)
        return response

    def _decide(self, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        task = self.task
        done, since = progress(messages)
        last = messages[-1]
        undone = remaining(task, sorted(done))
        if last["role"] == "checkpoint" and not last["accepted"]:
            return {"claim": sorted(done)}
        if since >= task.every or (not undone and since):
            claim = sorted(done)
            if task.liar and undone and (len(done) // task.every) % 3 == 1:
                claim = sorted({*claim, undone[0]})
            return {"claim": claim}
        if not undone:
            return {"final": "done"}
        call_id = "call_" + uuid.uuid4().hex[:16]
        return {"tool_call": {"id": call_id, "name": "do_subtask", "index": undone[0]}}
