"""Fork an agent run at a turn, and rewind one: the store's fork at the turn's first event.

Turn ``k`` is model request ``k`` (0-based, as the loop numbers them); a fork at ``k`` holds
the source's log before that request's first ``operation_completed`` (the whole committed
log when request ``k`` was never made). The fork's ``config`` is the source's with the agent
that continues it and ``forked`` (source run, turn, source agent): the turns before ``k``
are its fixed history, which the loop does not replay (see ``DurableExecutor``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from .._errors import InvalidInput, RunNotFound
from .._json import dumps
from .._validate import MAX_ID_BYTES, check_id
from ..store import Event, Store
from ._identity import ATTEMPT_STRIDE, MODEL_REQUEST, MODEL_STREAM
from ._ownership import stored_config

__all__ = [
    "FORKED",
    "fork_agent_run",
    "history_tools",
    "missing_tools",
    "new_run_id",
    "rewind_agent_run",
    "turn_seq",
]

FORKED = "forked"
"""The config key of a fork's origin: ``{"source", "turn", "agent"}``."""


def new_run_id(name: str) -> str:
    """A new run id: the agent's name and a random part (the random part alone when the
    name is too long for both)."""
    unique = uuid.uuid4().hex
    candidate = f"{name}-{unique}"
    return candidate if len(candidate.encode()) <= MAX_ID_BYTES else unique


def _model_steps(config: dict[str, Any]) -> set[str]:
    namespace = config.get("step_namespace")
    if not isinstance(namespace, str):
        return {MODEL_REQUEST, MODEL_STREAM}
    return {f"{namespace}.{MODEL_REQUEST}", f"{namespace}.{MODEL_STREAM}"}


def turn_seq(events: Sequence[Event], config: dict[str, Any], at_turn: int, run_id: str) -> int:
    """The seq of model request ``at_turn``'s first event (the end of the log + 1 when the
    request was never made); InvalidInput naming the range for a turn out of it."""
    steps = _model_steps(config)
    first: dict[int, int] = {}
    for event in events:
        payload = event.payload
        if event.type != "operation_completed" or not isinstance(payload, dict):
            continue
        sequence = payload.get("sequence")
        if payload.get("step_id") in steps and isinstance(sequence, int):
            first.setdefault(sequence % ATTEMPT_STRIDE, event.seq)
    made = len(first)
    if isinstance(at_turn, bool) or not isinstance(at_turn, int) or not 0 <= at_turn <= made:
        raise InvalidInput(
            f"at_turn must be a turn from 0 to {made} (the run made {made} model requests; "
            f"{made} forks its whole log), not {at_turn!r}",
            run_id=run_id,
        )
    if at_turn in first:
        return first[at_turn]
    return (events[-1].seq if events else 0) + 1


def history_tools(events: Iterable[Event], before: int) -> set[str]:
    """The tools the model called in the log's responses before model request ``before``."""
    names: set[str] = set()
    seen = 0
    for event in events:
        if event.type != "llm_call" or not isinstance(event.payload, dict):
            continue
        if seen >= before:
            break
        seen += 1
        calls = event.payload.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                names.add(call["name"])
    return names


def missing_tools(agent: Any, names: Iterable[str]) -> list[str]:
    """The tools of ``names`` that ``agent`` does not offer (none when a toolset of it is
    dynamic: its tools are known only as a run asks for them)."""
    offered: set[str] = set()
    for toolset in agent.all_toolsets:
        if toolset.is_dynamic:
            return []
        offered.update(tool.name for tool in toolset.tools)
    return sorted(set(names) - offered)


async def fork_agent_run(
    store: Store,
    source: str,
    *,
    at_turn: int,
    run_id: str | None = None,
    agent: Any = None,
    kind: str = "fork",
) -> str:
    """Fork the agent run ``source`` before model request ``at_turn``; the fork's id.

    ``agent`` (an ``Agent``) continues the fork instead of the source's agent: it must offer
    every tool the history called. RunNotFound for an unknown run."""
    check_id(source, "a run id")
    row = await store.get_run(source)
    if row is None:
        raise RunNotFound(
            f"no run {source!r} in this store; `zincir runs list` lists the runs it holds",
            run_id=source,
        )
    config = stored_config(row)
    source_agent = config.get("agent")
    if not isinstance(source_agent, str) or not isinstance(config.get("prompt"), str):
        raise InvalidInput(
            "the run is not an agent run stored with its agent and prompt; fork it at an "
            "event with zincir.fork_run(store, run_id, at_seq=N)",
            run_id=source,
        )
    events = await store.list_events(source)
    at_seq = turn_seq(events, config, at_turn, source)
    name = source_agent if agent is None else agent.name
    if agent is not None and name != source_agent:
        missing = missing_tools(agent, history_tools(events, at_turn))
        if missing:
            raise InvalidInput(
                f"agent {name!r} does not offer the tools the run's first {at_turn} turns "
                f"called ({', '.join(missing)}); give it those tools or fork with the run's "
                f"own agent {source_agent!r}",
                run_id=source,
            )
    new_id = new_run_id(name) if run_id is None else check_id(run_id, "a run id")
    forked = {"source": source, "turn": at_turn, "agent": source_agent}
    new_config = {**config, "agent": name, FORKED: forked}
    record = await store.fork_run(
        source,
        at_seq=at_seq,
        new_run_id=new_id,
        config_json=dumps(new_config, what="config", run_id=new_id),
        name=name,
        kind=kind,
    )
    return str(record["id"])


async def rewind_agent_run(
    store: Store,
    source: str,
    *,
    at_turn: int,
    run_id: str | None = None,
    agent: Any = None,
) -> str:
    """Fork ``source`` at ``at_turn`` (kind ``rewind``) and cancel it, the reason naming the
    fork and the turn; the fork's id."""
    fork_id = await fork_agent_run(
        store, source, at_turn=at_turn, run_id=run_id, agent=agent, kind="rewind"
    )
    await store.cancel_run(source, reason=f"rewound to turn {at_turn}: continued as run {fork_id}")
    return fork_id
