"""DurableRunner: ``agents.Runner.run`` as a zincir run that survives a kill.

Built on the operation layer the durable agent loop uses (``AgentContext`` for the run's row
and lease, ``LocalRuntime.execute`` for each unit), not on workflow steps: the SDK drives its
own loop, and each of its side effects (a model call, a tool call, an MCP call) maps onto an
operation kind zincir already knows (``model_request``, ``model_stream``, ``tool_call``,
``mcp_request``, ``approval_resume``), with the identity rules, input drift checks, replay
against the log, inspector views and ``check-compat`` that go with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from typing import Any

from agents import Agent, RunConfig, RunResult, RunResultStreaming, RunState
from agents import Runner as SDKRunner
from agents.exceptions import AgentsException
from agents.run import DEFAULT_MAX_TURNS
from agents.stream_events import StreamEvent

from ..._errors import InvalidInput, ZincirError, ZincirSignal
from ..._validate import check_count, check_id, check_lease_ttl
from ...runs import AgentContext
from ...runs._budget import Budget, check_budget_arg
from ...runs._context import DEFAULT_LEASE_TTL
from ...runs._versions import app_version_or_default
from ...runs._worker import Handler
from ...store import Store, as_store, open_store
from ._agents import DurableAgents
from ._approvals import decisions_for
from ._codec import digest, jsonable
from ._run import PROVIDER, RunScope, adopt, open_run

__all__ = ["DurableRunner", "DurableStreamedRun", "run_id_of"]

_RUN_ID_ATTRIBUTE = "zincir_run_id"


def run_id_of(result: RunResult | RunResultStreaming | DurableStreamedRun) -> str:
    """The zincir run id of a result ``DurableRunner`` returned (its own, or a new one)."""
    if isinstance(result, DurableStreamedRun):
        return result.run_id
    found = getattr(result, _RUN_ID_ATTRIBUTE, None)
    if not isinstance(found, str):
        raise InvalidInput("this result did not come from a DurableRunner; it has no run id")
    return found


class DurableRunner:
    """Runs OpenAI Agents SDK agents as durable zincir runs on ``store`` (a store, or a
    database path or URL, opened on first use and closed by :meth:`close`).

    ``await runner.run(agent, input, run_id=...)`` is ``agents.Runner.run`` whose model, tool
    and MCP calls are each recorded once: the same call after a crash replays what finished
    and calls nothing twice. ``lease_ttl`` is each run's lease (a run whose owner died on
    this machine is taken over at once); ``app_version`` is recorded on each new run
    (default ``$ZINCIR_APP_VERSION``).
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        lease_ttl: timedelta | float = DEFAULT_LEASE_TTL,
        app_version: str | None = None,
    ) -> None:
        if not isinstance(store, str | os.PathLike):
            as_store(store)
        self._store = store
        self._owned = not isinstance(store, Store)
        self.lease_ttl = check_lease_ttl(lease_ttl)
        self.app_version = app_version_or_default(app_version)

    @property
    def store(self) -> Store:
        """The zincir store holding the runs."""
        if isinstance(self._store, str | os.PathLike):
            self._store = open_store(self._store)
        return self._store

    async def close(self) -> None:
        """Close the store if this runner opened it."""
        if self._owned and not isinstance(self._store, str | os.PathLike):
            await self._store.close()

    async def __aenter__(self) -> DurableRunner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_id: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        context: Any = None,
        run_config: RunConfig | None = None,
        budget: Budget | None = None,
    ) -> RunResult:
        """Run ``agent`` on ``input`` as the durable run ``run_id`` (a new id when None,
        :func:`run_id_of` tells it); the SDK's own ``RunResult``.

        A run id that exists continues that run: a finished one is replayed from its records
        (nothing is called); another input raises InputDrift. A run that stops on tool calls
        needing approval returns the SDK's result with ``interruptions`` and waits: decide
        them (``zincir approvals``, ``zincir.agent.decide``) and call ``run`` again with the
        same id and input.
        """
        run = _Run(self, agent, input, run_id, max_turns, context, run_config, budget)
        scope = await run.open()
        result: RunResult = await run.guarded(scope, run.drive(scope))
        setattr(result, _RUN_ID_ATTRIBUTE, scope.run_id)
        return result

    def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_id: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        context: Any = None,
        run_config: RunConfig | None = None,
        budget: Budget | None = None,
    ) -> DurableStreamedRun:
        """:meth:`run`, streamed: iterate ``stream_events()`` for the SDK's stream events (a
        replayed model call yields its recorded events, calling nothing), then read
        ``result``."""
        run = _Run(self, agent, input, run_id, max_turns, context, run_config, budget)
        return DurableStreamedRun(run)

    def resume_handler(
        self, agent: Agent[Any], *, context: Any = None, run_config: RunConfig | None = None
    ) -> Handler:
        """A handler continuing this runner's runs of ``agent`` from the run alone (its
        input and ``max_turns`` are stored on it): for a ``ResumeWorker``, ``zincir worker``
        or ``zincir check-compat``."""

        async def handle(ctx: AgentContext) -> None:
            row = await ctx.store.get_run(ctx.run_id)
            stored = _stored_config(row["config"] if row is not None else None, ctx.run_id)
            run = _Run(
                self,
                agent,
                stored["input"],
                ctx.run_id,
                int(stored.get("max_turns", DEFAULT_MAX_TURNS)),
                context,
                run_config,
                None,
            )
            scope = await adopt(ctx)
            await run.guarded(scope, run.drive(scope), release=False)

        return handle


class DurableStreamedRun:
    """A streamed durable run: ``stream_events()`` yields the SDK's ``StreamEvent`` objects
    (across the continuations that apply approval decisions); ``result`` is the SDK's
    ``RunResultStreaming`` of its last part once the events are consumed."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self.result: RunResultStreaming | None = None

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def final_output(self) -> Any:
        if self.result is None:
            raise InvalidInput(
                "the run's events were not consumed yet: iterate stream_events() first",
                run_id=self.run_id,
            )
        return self.result.final_output

    @property
    def interruptions(self) -> list[Any]:
        return [] if self.result is None else list(self.result.interruptions)

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        run = self._run
        scope = await run.open()
        events: asyncio.Queue[StreamEvent] = asyncio.Queue()

        async def streamed() -> RunResultStreaming:
            config, start = run.prepare(scope)
            result = SDKRunner.run_streamed(start, run.input, **run.options(config))
            self.result = result
            while True:
                async for event in result.stream_events():
                    events.put_nowait(event)
                if not result.interruptions:
                    return result
                decided = await decisions_for(scope, result.interruptions)
                if decided is None:
                    return result
                state = _apply(result.to_state(), decided)
                result = SDKRunner.run_streamed(start, state, **run.options(config, state=True))
                self.result = result

        # Events are handed on as the SDK yields them: run the drive in this generator.
        drive = run.guarded(scope, streamed(), stream=True)
        async for event in _pump(drive, events):
            yield event
        setattr(self.result, _RUN_ID_ATTRIBUTE, scope.run_id)


async def _pump(
    drive: Awaitable[Any], events: asyncio.Queue[StreamEvent]
) -> AsyncIterator[StreamEvent]:
    """Yield ``events`` as ``drive`` puts them, until it finishes (raising its error)."""
    task = asyncio.ensure_future(drive)
    try:
        while True:
            if task.done() and events.empty():
                break
            getting = asyncio.ensure_future(events.get())
            await asyncio.wait({getting, task}, return_when=asyncio.FIRST_COMPLETED)
            if getting.done():
                yield getting.result()
            else:
                getting.cancel()
        task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class _Run:
    """One call of ``run`` / ``run_streamed``: its arguments and how it drives the SDK."""

    def __init__(
        self,
        runner: DurableRunner,
        agent: Agent[Any],
        input: str | list[Any],
        run_id: str | None,
        max_turns: int,
        context: Any,
        run_config: RunConfig | None,
        budget: Budget | None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise InvalidInput(f"agent must be an agents.Agent, not {type(agent).__name__}")
        if isinstance(input, RunState):
            raise InvalidInput(
                "DurableRunner resumes a run from its id, not from a RunState: call run() "
                "again with the run's id and original input after deciding its approvals",
                run_id=run_id,
            )
        if not isinstance(input, str | list):
            raise InvalidInput(
                f"input must be a str or a list of items, not {type(input).__name__}"
            )
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise InvalidInput("run_config must be an agents.RunConfig", run_id=run_id)
        self.runner = runner
        self.agent = agent
        self.input = input
        self.run_id = check_id(run_id, "a run id") if run_id is not None else _new_id(agent)
        self.max_turns = check_count(max_turns, "max_turns", run_id=self.run_id)
        self.context = context
        self.run_config = run_config or RunConfig()
        self.budget = check_budget_arg(budget, self.run_id)

    async def open(self) -> RunScope:
        stored_input = jsonable(self.input)
        config = {
            "integration": PROVIDER,
            "agent": self.agent.name,
            "input": stored_input,
            "input_sha256": digest(stored_input),
            "max_turns": self.max_turns,
        }
        return await open_run(
            self.runner.store,
            self.run_id,
            name=_run_name(self.agent),
            config=config,
            lease_ttl=self.runner.lease_ttl,
            app_version=self.runner.app_version,
            budget=self.budget,
        )

    def prepare(self, scope: RunScope) -> tuple[RunConfig, Agent[Any]]:
        """The run config (its run-wide model made durable, traces grouped by run id) and
        the durable copy of the starting agent."""
        agents = DurableAgents(scope, self.run_config)
        changes: dict[str, Any] = {}
        model = agents.run_model()
        if model is not None:
            changes["model"] = model
        if self.run_config.group_id is None:  # the SDK's traces of one run, across restarts
            changes["group_id"] = scope.run_id
        if self.run_config.trace_metadata is None:
            changes["trace_metadata"] = {"zincir.run_id": scope.run_id}
        config = dataclasses.replace(self.run_config, **changes) if changes else self.run_config
        return config, agents.copy(self.agent)

    def options(self, config: RunConfig, *, state: bool = False) -> dict[str, Any]:
        options: dict[str, Any] = {"max_turns": self.max_turns, "run_config": config}
        if not state:
            options["context"] = self.context
        return options

    async def drive(self, scope: RunScope) -> RunResult:
        config, start = self.prepare(scope)
        result = await SDKRunner.run(start, self.input, **self.options(config))
        while result.interruptions:
            decided = await decisions_for(scope, result.interruptions)
            if decided is None:
                return result
            state = _apply(result.to_state(), decided)
            result = await SDKRunner.run(start, state, **self.options(config, state=True))
        return result

    async def guarded(
        self, scope: RunScope, drive: Awaitable[Any], *, release: bool = True, stream: bool = False
    ) -> Any:
        """Await ``drive`` under the run's lease: complete the run with its output, leave it
        waiting on interruptions, fail it on an SDK error that would repeat, release it on
        anything else (the same call then continues it)."""
        ctx = scope.ctx
        try:
            result = await drive
        except BaseException as raised:
            error = _zincir_cause(raised)
            if ctx is not None:
                if error is None and _repeats(raised):
                    await _quietly(ctx.fail(f"{type(raised).__name__}: {raised}"))
                elif release:
                    await _quietly(ctx.release())
            if error is not None:
                raise error from raised
            raise
        if ctx is not None:
            if result.interruptions:
                if release:
                    await ctx.release()
            else:
                await ctx.complete(
                    {
                        "final_output": jsonable(result.final_output),
                        "last_agent": result.last_agent.name,
                    }
                )
        return result


def _apply(state: RunState[Any, Any], decided: list[Any]) -> RunState[Any, Any]:
    for one in decided:
        if one.approve:
            state.approve(one.item)
        else:
            state.reject(one.item, rejection_message=one.reason or None)
    return state


def _repeats(error: BaseException) -> bool:
    """Whether the SDK's error would end the run again (a tripped guardrail, max_turns, a
    behaviour error): one of its own, not one it wraps around a tool's or a provider's."""
    if not isinstance(error, AgentsException):
        return False
    cause = error.__cause__
    return cause is None or isinstance(cause, AgentsException)


def _zincir_cause(error: BaseException) -> BaseException | None:
    """The zincir error or signal the SDK wrapped (a tool's ``UserError`` around it)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ZincirError | ZincirSignal):
            return None if current is error else current
        current = current.__cause__ or current.__context__
    return None


def _stored_config(text: Any, run_id: str) -> dict[str, Any]:
    import json

    try:
        config = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        config = None
    if (
        not isinstance(config, dict)
        or config.get("integration") != PROVIDER
        or "input" not in config
    ):
        raise InvalidInput(
            "the run is not an OpenAI Agents SDK run of a DurableRunner (its input is not "
            "stored on it); resume it with the code that started it",
            run_id=run_id,
        )
    return config


def _run_name(agent: Agent[Any]) -> str:
    from ..._validate import name_problem

    name = agent.name
    return name if name and name_problem("a run name", name) is None else "openai-agent"


def _new_id(agent: Agent[Any]) -> str:
    """A new run id: the agent's name and a random part, as zincir's ``Runner`` makes them."""
    from ...agent._fork import new_run_id

    return new_run_id(_run_name(agent))


async def _quietly(action: Awaitable[None]) -> None:
    """Close the run on the way out without hiding the error that ended it."""
    with contextlib.suppress(Exception):
        await action
