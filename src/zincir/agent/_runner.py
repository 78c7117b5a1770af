"""``Runner``: the one-object way to run durable agents.

A runner holds a store and the agents it serves. It builds what ``DurableBinding`` needs
(handler ids derived from each agent's name, a ``HandlerRegistry`` served by each agent, a
``LocalRuntime``), gives every run an id, and can resume any unfinished run of its agents
from the run alone: an agent run stores its agent's name and its prompt in its ``config``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable, Iterable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from .._errors import InvalidInput, RunNotFound, ZincirError
from .._json import MAX_DOCUMENT_BYTES
from .._validate import check_count, check_id, check_lease_ttl
from .._validate import check_positive_duration as _check_interval
from ..durable import DurableRuntime, HandlerRegistry, LocalRuntime
from ..runs import AgentContext
from ..runs._budget import Budget
from ..runs._spin import SpinRules
from ..store import Store, as_store, open_store
from ..store._queues import is_queued
from ._agent import Agent, AgentStream
from ._binding import DurableBinding, Handlers, in_graph_node
from ._errors import RunNotResumable
from ._fork import fork_agent_run, new_run_id, rewind_agent_run
from ._ownership import stored_config
from ._queue import Queue, QueueWorker, enqueue_run
from ._result import AgentRunResult
from ._schedule import ScheduleTicker, check_schedule
from ._serve import serve as serve_agent
from ._stream import discard

__all__ = ["Runner"]

log = logging.getLogger("zincir.runner")


class Runner:
    """Runs durable agents on one store: ``run``, ``run_stream``, ``resume``, ``serve``.

    ``store`` is a store or a database path or URL (opened, and closed by :meth:`close`);
    ``agents`` are the agents it serves, with unique names; ``lease_ttl`` is each run's
    lease. ``runtime`` defaults to a ``LocalRuntime`` on the store; another (a
    ``TemporalRuntime``) must have its workers serve :attr:`registry` and be built with
    the handler ids of :meth:`handlers_for`. With ``durable_stream`` (the default) the
    streamed runs it runs or resumes append what they yield to the run's durable stream
    (``zincir.streams.read``); ``run`` writes none.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        agents: Iterable[Agent],
        *,
        lease_ttl: timedelta | float = timedelta(seconds=30),
        runtime: DurableRuntime | None = None,
        durable_stream: bool = True,
    ) -> None:
        self.lease_ttl = check_lease_ttl(lease_ttl)
        if not isinstance(durable_stream, bool):
            raise InvalidInput("durable_stream must be True or False")
        self.durable_stream = durable_stream
        found: dict[str, Agent] = {}
        if isinstance(agents, Agent) or not isinstance(agents, Iterable):
            raise InvalidInput("agents must be a list of zincir.agent.Agent objects")
        for agent in agents:
            if not isinstance(agent, Agent):
                raise InvalidInput(f"agents must hold zincir.agent.Agent objects, not {agent!r}")
            if agent.name in found:
                raise InvalidInput(
                    f"two agents are named {agent.name!r}; a runner's agents need unique names "
                    "(a run is resumed by its agent's name)"
                )
            found[agent.name] = agent
        if not found:
            raise InvalidInput("a Runner needs at least one agent")
        if runtime is not None and not callable(getattr(runtime, "execute", None)):
            raise InvalidInput(
                "runtime must be a DurableRuntime (an object with async execute(invocation))"
            )
        self.registry = HandlerRegistry()
        """Every handler of every agent: what a worker of another runtime must serve."""
        self._handlers = {name: self.handlers_for(agent) for name, agent in found.items()}
        for name, agent in found.items():
            serve_agent(self.registry, agent, self._handlers[name])
        self._agents = found
        self._owns_store = isinstance(store, str | os.PathLike)
        self.store: Store = (
            open_store(store) if isinstance(store, str | os.PathLike) else as_store(store)
        )
        # A long conversation is one model request's input: it is stored once (each message
        # once), so the runner allows the largest document zincir stores, not the 1 MiB
        # default of a bare invocation.
        self.runtime: DurableRuntime = (
            runtime
            if runtime is not None
            else LocalRuntime(self.store, self.registry, max_input_bytes=MAX_DOCUMENT_BYTES)
        )
        self._ticker = ScheduleTicker(self.store, found)

    def __repr__(self) -> str:
        return f"Runner(agents={list(self._agents)!r})"

    @property
    def agents(self) -> Mapping[str, Agent]:
        """The agents this runner serves, by name."""
        return MappingProxyType(self._agents)

    @staticmethod
    def handlers_for(agent: Agent) -> Handlers:
        """The handler ids a runner gives ``agent``, one per operation kind, derived from its
        name (``weather.model-request``, …): the same in every process."""
        if not isinstance(agent, Agent):
            raise InvalidInput(f"handlers_for takes a zincir.agent.Agent, not {agent!r}")
        name = agent.name
        return Handlers(
            model_request=f"{name}.model-request",
            model_stream=f"{name}.model-stream",
            tool_call=f"{name}.tool-call",
            mcp_request=f"{name}.mcp-request",
            retry_delay=f"{name}.retry-delay",
            approval_resume=f"{name}.approval-resume",
            event_delivery=f"{name}.event-delivery",
        )

    # -- running ------------------------------------------------------------------------

    async def run(
        self,
        agent: Agent | str,
        prompt: str,
        *,
        run_id: str | None = None,
        app_version: str | None = None,
        budget: Budget | None = None,
        spin: SpinRules | None = None,
    ) -> AgentRunResult:
        """Run ``agent`` (or the agent of that name) on ``prompt`` as a durable run.

        Without ``run_id`` the run gets a new id (``result.run_id``). Inside a LangGraph
        node the run is ``<run_id or agent name>.graph.<node>.step.<n>.<task-id>``, so the
        node run again after a crash continues it (the LangGraph guide's graph namespaces).
        A run id that exists continues that run: a finished one returns its stored result
        and calls nothing; a different prompt raises ``InputDrift``. ``app_version``,
        ``budget`` and ``spin`` are those of ``DurableBinding``.
        """
        chosen = self._agent(agent)
        if not isinstance(prompt, str):
            raise InvalidInput("prompt must be a str")
        binding = self._binding(chosen, run_id, app_version=app_version, budget=budget, spin=spin)
        return await chosen.run(prompt, durable=binding)

    def run_stream(
        self,
        agent: Agent | str,
        prompt: str,
        *,
        run_id: str | None = None,
        app_version: str | None = None,
        budget: Budget | None = None,
        spin: SpinRules | None = None,
    ) -> AgentStream:
        """:meth:`run`, yielding each stream part and tool result as ``agent.run_stream``
        does; ``.result`` (with its ``run_id``) once iterated to the end."""
        chosen = self._agent(agent)
        binding = self._binding(chosen, run_id, app_version=app_version, budget=budget, spin=spin)
        return chosen.run_stream(prompt, durable=binding)

    async def resume(
        self,
        run_id: str,
        decisions: Mapping[str, object] | None = None,
        *,
        budget: Budget | None = None,
    ) -> AgentRunResult:
        """Continue the run ``run_id`` from its log, its agent and prompt read from the run.

        A finished run returns its stored result. A paused run applies ``decisions`` (call
        id → ``Approve`` / ``Deny`` / ``ExternalResult``) and those recorded with
        ``decide``; calls left undecided pause it again. ``budget`` replaces the one in
        force (raising it resumes a run its budget paused). A run waiting in a queue starts at
        once, outside the queue's limits (it then counts against them). RunNotFound for an
        unknown run; RunNotResumable for a run of an agent this runner does not serve, or one
        stored without its prompt.
        """
        check_id(run_id, "a run id")
        agent, prompt, config = await self._stored(run_id)
        namespace = config.get("step_namespace")
        binding = self._binding(
            agent,
            run_id,
            budget=budget,
            namespace=namespace if isinstance(namespace, str) else None,
        )
        streamed = config.get("stream") is True
        emit = discard if streamed else None
        if decisions:
            paused = await agent.paused_run(durable=binding)
            if paused is None and await self.store.run_is_finished(run_id):
                return await agent._run_durable(prompt, binding, emit=emit)  # its result
            if paused is None:
                raise InvalidInput(
                    "the run waits for no decision; resume it without decisions",
                    run_id=run_id,
                )
            return await agent._resume(paused, decisions, binding, emit)
        return await agent._run_durable(prompt, binding, emit=emit)

    async def fork(
        self,
        source_run_id: str,
        /,
        *,
        at_turn: int,
        run_id: str | None = None,
        agent: Agent | str | None = None,
    ) -> str:
        """A new run holding the history of run ``source_run_id`` before model request
        ``at_turn`` (0-based); its id. :meth:`resume` continues it from that request live,
        the turns before it replayed from the copied records.

        ``agent`` (one this runner serves) continues the fork instead of the source's
        agent: a different model or instructions; the history stays the source's. The
        source is untouched. RunNotFound for an unknown run; InvalidInput for a turn out of
        range or an agent lacking a tool the history called.
        """
        chosen = None if agent is None else self._agent(agent)
        return await fork_agent_run(
            self.store, source_run_id, at_turn=at_turn, run_id=run_id, agent=chosen
        )

    async def rewind(
        self,
        source_run_id: str,
        /,
        *,
        at_turn: int,
        run_id: str | None = None,
        agent: Agent | str | None = None,
    ) -> str:
        """:meth:`fork` that replaces: the source run is cancelled, its reason naming the
        fork and the turn; the fork's id."""
        chosen = None if agent is None else self._agent(agent)
        return await rewind_agent_run(
            self.store, source_run_id, at_turn=at_turn, run_id=run_id, agent=chosen
        )

    async def serve(
        self,
        until: Awaitable[Any],
        *,
        max_concurrency: int = 10,
        poll_interval: timedelta | float | None = None,
    ) -> None:
        """Resume every unfinished run of this runner's agents until ``until`` completes,
        and start the runs of its agents waiting in queues, within each queue's limits.

        Runs whose owner died on this machine are taken over at once, others once their
        lease lapses; a run paused for a person is claimed once a decision arrives. It starts
        the ticks of its agents' schedules (:meth:`schedule`), waking at the next one. Then
        the runs in flight finish (or pause) before it returns.
        """
        try:
            worker = QueueWorker(self.store, self.lease_ttl, names=list(self._agents))
            worker.max_concurrency(check_count(max_concurrency, "max_concurrency"))
            if poll_interval is not None:
                worker.poll_interval(_check_interval(poll_interval, "poll_interval"))
        except BaseException:
            if inspect.iscoroutine(until):
                until.close()  # never started: do not leave it un-awaited
            raise
        stop = asyncio.Event()

        async def watched() -> Any:
            try:
                return await until
            finally:
                stop.set()

        ticking = asyncio.ensure_future(self._ticker.run(stop))
        try:
            await worker.run(self._resume_claimed, watched())
        finally:
            stop.set()
            await ticking

    async def schedule(
        self,
        name: str,
        *,
        cron: str,
        agent: Agent | str,
        prompt: str,
        timezone: str = "UTC",
        missed: str = "run_once",
        queue: Queue | None = None,
    ) -> str:
        """Store schedule ``name``: a run of ``agent`` on ``prompt`` at each tick of ``cron``
        (five fields, or six with seconds first) in ``timezone``, started by one of the
        processes serving the agent (:meth:`serve`), with the run id
        ``schedule-{name}-{tick UTC, %Y%m%dT%H%M%SZ}``.

        A tick missed while nothing served runs once on the next start (``missed="run_once"``,
        the latest such tick only) or not (``"skip"``). Declaring it again with the same
        settings changes nothing (``"unchanged"``); other settings replace the stored ones
        (``"updated"``: ticks start after now). Returns ``"created"``, ``"unchanged"`` or
        ``"updated"``; InvalidInput, with nothing stored, for an invalid cron expression or
        time zone. With ``queue`` each tick's run waits in that queue (as :meth:`enqueue`).
        """
        chosen = self._agent(agent)
        if queue is not None and not isinstance(queue, Queue):
            raise InvalidInput(f"queue must be a zincir.Queue or None, not {queue!r}")
        queued = None if queue is None else queue.name
        spec = check_schedule(name, cron, timezone, chosen.name, prompt, missed, queued)
        settings = None if queue is None else queue.settings()
        declared = await self.store.declare_schedule(spec, settings)
        if declared != "unchanged":
            log.info("schedule %s %s: %s in %s", name, declared, cron, timezone)
            self._ticker.changed.set()
        return declared

    async def enqueue(
        self,
        agent: Agent | str,
        prompt: str,
        *,
        queue: Queue,
        key: str | None = None,
        priority: int = 0,
        run_id: str | None = None,
        dedupe_id: str | None = None,
    ) -> str:
        """Store a run of ``agent`` on ``prompt`` waiting in ``queue``; its run id. A
        serving process (:meth:`serve`) starts it, higher ``priority`` first then oldest,
        within the queue's limits (``key``: the key ``concurrency_per_key`` counts by). A
        ``dedupe_id`` already used in that queue returns that run's id and stores nothing.
        """
        return await enqueue_run(
            self.store,
            self._agent(agent),
            prompt,
            queue=queue,
            key=key,
            priority=priority,
            run_id=run_id,
            dedupe_id=dedupe_id,
        )

    async def _resume_claimed(self, ctx: AgentContext) -> None:
        """A ResumeWorker's handler: the agent loop runs on the lease ``ctx`` holds."""
        run_id = ctx.run_id
        log.info("[run %s] resumed", run_id)
        try:
            result = await self.resume(run_id)
        except ZincirError as error:
            if await self.store.run_is_finished(run_id):
                log.info("[run %s] failed: %s", run_id, error.detail)
                return  # the run is failed and its error stored: nothing to retry
            log.warning("[run %s] stopped: %s", run_id, error)
            raise
        if result.paused is not None:
            calls = ", ".join(call.call_id for call in result.paused.calls)
            log.info("[run %s] paused: waiting for decisions on %s", run_id, calls)
        else:
            log.info("[run %s] completed: %s", run_id, _one_line(result.output))

    # -- closing ------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the store when the runner opened it (from a path or URL)."""
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- helpers ------------------------------------------------------------------------

    def _agent(self, agent: Agent | str) -> Agent:
        if isinstance(agent, str):
            found = self._agents.get(agent)
            if found is None:
                raise InvalidInput(
                    f"this runner serves no agent named {agent!r}; it serves {sorted(self._agents)}"
                )
            return found
        if not isinstance(agent, Agent):
            raise InvalidInput(f"agent must be a zincir.agent.Agent or its name, not {agent!r}")
        if self._agents.get(agent.name) is not agent:
            raise InvalidInput(
                f"agent {agent.name!r} is not one this runner serves; pass it in "
                "Runner(store, [agents])"
            )
        return agent

    def _binding(
        self,
        agent: Agent,
        run_id: str | None,
        *,
        app_version: str | None = None,
        budget: Budget | None = None,
        spin: SpinRules | None = None,
        namespace: str | None = None,
    ) -> DurableBinding:
        return DurableBinding(
            self.runtime,
            _default_run_id(agent) if run_id is None else run_id,
            self._handlers[agent.name],
            step_namespace=namespace,
            lease_ttl=self.lease_ttl,
            store=self.store,
            app_version=app_version,
            budget=budget,
            spin=spin,
            durable_stream=self.durable_stream,
        )

    async def _stored(self, run_id: str) -> tuple[Agent, str, dict[str, Any]]:
        """The agent, prompt and config a stored run was started with."""
        row = await self.store.get_run(run_id)
        if row is None:
            raise RunNotFound(
                f"no run {run_id!r} in this runner's store; `zincir runs list --db PATH` lists "
                "the runs it holds (start a new one with Runner.run)",
                run_id=run_id,
            )
        config = stored_config(row)
        name = config.get("agent", row["name"])
        agent = self._agents.get(name) if isinstance(name, str) else None
        if agent is None:
            raise RunNotResumable(
                f"the run is a run of agent {name!r}; this runner serves "
                f"{sorted(self._agents)}; resume it with a runner that serves that agent",
                run_id=run_id,
            )
        prompt = config.get("prompt")
        if not isinstance(prompt, str):
            raise RunNotResumable(
                "the run was stored without its prompt (it was started before agent runs "
                "kept it); continue it with agent.run(its prompt, durable=DurableBinding(...))",
                run_id=run_id,
            )
        if is_queued(row):  # started now, outside its queue's limits
            await self.store.start_queued_run(run_id)
        return agent, prompt, config


def _default_run_id(agent: Agent) -> str:
    """A new run id; inside a LangGraph node the agent's name, which the agent run derives
    its node's run id from (``<name>.graph.<node>.step.<n>.<task-id>``), so the node run
    again after a crash continues the same run."""
    return agent.name if in_graph_node() else new_run_id(agent.name)


def _one_line(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
