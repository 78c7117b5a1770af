"""``Agent``: a model, instructions and tools, run directly or through a DurableBinding."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import _telemetry as telemetry
from .._errors import ApprovalMismatch, InvalidDocument, InvalidInput, ZincirError
from .._validate import check_count, check_id, check_positive_duration
from ..contract.payloads import ApprovalDecision, EventDelivery, RunContext
from ..durable import RetryPolicy
from ..store import Event, OperationKey, Store
from ._approval import PausedCall, PausedRun, args_sha256, as_document
from ._binding import DurableBinding
from ._capabilities import LOAD_CAPABILITY, capability_toolsets, load_capability_tool
from ._checkpoint import load_paused, recorded_decisions
from ._direct import DirectExecutor
from ._durable import DurableExecutor, Logged
from ._errors import DurableOperationFailed, ToolRetriesExhausted
from ._hooks import AgentHooks
from ._identity import MAX_RETRIES, MODEL_REQUEST, MODEL_STREAM
from ._loop import Proposal, run_loop
from ._models import Model
from ._ownership import check_prompt, run_config, stored_config, take_run
from ._policies import ToolPolicy, check_policies
from ._preflight import ResolvedToolsets, check_route
from ._result import AgentRunResult, result_from_stored, stored_result
from ._retry import DEFAULT_MODEL_RETRY, DEFAULT_TOOL_RETRY
from ._stream import Emit, StreamEvent
from ._tools import (
    Tool,
    ToolArgumentsRejected,
    ToolErrors,
    ToolFunction,
    Toolset,
    check_tool_errors,
)

if TYPE_CHECKING:
    from ..restart._protocol import RestartStore

__all__ = ["Agent", "AgentStream", "EventSink"]

EventSink = Callable[[EventDelivery], Awaitable[None] | None]

_DETERMINISTIC_FAILURES = (DurableOperationFailed, ToolRetriesExhausted, InvalidDocument)


class Agent:
    """A small provider-agnostic loop: model → tool calls → model … → final text.

    ``retry`` is the policy for retryable model failures (connection errors, timeouts, 429,
    5xx); the default, ``DEFAULT_MODEL_RETRY``, waits out at least 10 minutes of outage with
    durable full-jitter delays (``RetryPolicy.no_retry()`` fails at once). ``tool_retries``
    bounds how often in a row the model may call a tool wrongly (unknown tool, arguments
    that are not JSON or fail the schema) before the run fails. ``tool_errors`` says what a
    tool's ordinary exception does: ``"report"`` it to the model as the call's error result
    (the default) or ``"fail"`` the run (a tool's own ``tool_errors`` wins); ``tool_retry``
    is the policy for a tool that raises ``RetryTool`` (default ``DEFAULT_TOOL_RETRY``).
    ``tool_policies`` (``ToolPolicy``) rewrite every tool's arguments, refuse calls and
    rewrite results, around each tool's own ``policies``. ``hooks`` observe.
    ``capabilities`` (name → toolset) are offered only once the model loads them with the
    built-in ``load_capability`` tool; preflight checks their handlers from the start.
    ``approval_timeout`` bounds how long a durable run's paused call waits for a person's
    decision (``decide``) before it is denied; None waits forever.
    """

    def __init__(
        self,
        model: Model,
        *,
        name: str = "agent",
        instructions: str | None = None,
        tools: Iterable[Tool | ToolFunction] = (),
        toolsets: Iterable[Toolset] = (),
        retry: RetryPolicy | None = None,
        hooks: Iterable[AgentHooks] = (),
        tool_retries: int = 3,
        event_sink: EventSink | None = None,
        capabilities: Mapping[str, Toolset | Iterable[Tool | ToolFunction]] | None = None,
        approval_timeout: timedelta | float | None = None,
        tool_errors: ToolErrors = "report",
        tool_retry: RetryPolicy | None = None,
        tool_policies: Iterable[ToolPolicy] = (),
    ) -> None:
        if not isinstance(getattr(model, "name", None), str) or not callable(
            getattr(model, "request", None)
        ):
            raise InvalidInput("model must implement zincir.agent.Model (name, request)")
        self.model = model
        self.name = check_id(name, "an agent name")
        if instructions is not None and not isinstance(instructions, str):
            raise InvalidInput("instructions must be a str or None")
        self.instructions = instructions
        self.capabilities = capability_toolsets(capabilities)
        builtin = (
            (Toolset([load_capability_tool(list(self.capabilities))], id=LOAD_CAPABILITY),)
            if self.capabilities
            else ()
        )
        self.toolsets: tuple[Toolset, ...] = (Toolset(tools, id="tools"), *toolsets, *builtin)
        for toolset in self.toolsets:
            if not isinstance(toolset, Toolset):
                raise InvalidInput(f"toolsets must hold Toolset objects, not {toolset!r}")
        self.tools_by_name([(ts, ts.tools) for ts in self.all_toolsets if not ts.is_dynamic])
        for policy, what in ((retry, "retry"), (tool_retry, "tool_retry")):
            if policy is not None and not isinstance(policy, RetryPolicy):
                raise InvalidInput(f"{what} must be a zincir.RetryPolicy or None")
            if policy is not None and policy.max_attempts > MAX_RETRIES:
                raise InvalidInput(
                    f"{what}.max_attempts is at most {MAX_RETRIES} (each retry timer takes "
                    "one of the failed call's sequences)"
                )
        self.retry = retry if retry is not None else DEFAULT_MODEL_RETRY
        self.tool_retry = tool_retry if tool_retry is not None else DEFAULT_TOOL_RETRY
        self.tool_errors = check_tool_errors(tool_errors)
        self.tool_policies = check_policies(tool_policies, "Agent(tool_policies=...)")
        self.hooks: tuple[AgentHooks, ...] = tuple(hooks)
        self.tool_retries = check_count(tool_retries, "tool_retries")
        self.event_sink = event_sink
        self.approval_timeout = (
            None
            if approval_timeout is None
            else check_positive_duration(approval_timeout, "approval_timeout")
        )

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r})"

    async def run(self, prompt: str, *, durable: DurableBinding | None = None) -> AgentRunResult:
        """Run to the final text; with ``durable`` every side effect is a durable operation."""
        return await self._run(prompt, durable, None)

    def run_stream(self, prompt: str, *, durable: DurableBinding | None = None) -> AgentStream:
        """Run, yielding each stream part and tool result; ``.result`` once iterated.

        On the durable path each model call is a ``model.stream`` operation and yields its
        stored response's normalised parts (start, delta, end per part, then usage); a
        replay yields the same parts whatever chunks the provider sent.
        """
        if not isinstance(prompt, str):
            raise InvalidInput("prompt must be a str")
        _check_binding(durable)
        return AgentStream(lambda emit: self._run(prompt, durable, emit))

    async def _run(
        self, prompt: str, durable: DurableBinding | None, emit: Emit | None
    ) -> AgentRunResult:
        if not isinstance(prompt, str):
            raise InvalidInput("prompt must be a str")
        if durable is None:
            return await run_loop(self, prompt, DirectExecutor(self.model, emit))
        _check_binding(durable)
        return await self._run_durable(prompt, durable._in_graph_node(), emit=emit)

    async def resume(
        self,
        paused: PausedRun,
        decisions: Mapping[str, object],
        *,
        durable: DurableBinding | None = None,
    ) -> AgentRunResult:
        """Continue a paused run with a decision (``Approve``, ``Deny``, ``ExternalResult``)
        per call id; calls left undecided pause the run again.

        Each decision binds the arguments its paused call lists (``args_sha256``); on the
        durable path it goes through ``approval_resume`` and the persisted one is applied.
        """
        return await self._resume(paused, decisions, durable, None)

    async def _resume(
        self,
        paused: PausedRun,
        decisions: Mapping[str, object],
        durable: DurableBinding | None,
        emit: Emit | None,
    ) -> AgentRunResult:
        if not isinstance(paused, PausedRun):
            raise InvalidInput("paused must be the PausedRun of a result (or agent.paused_run)")
        run_id = paused.run_id
        if not isinstance(decisions, Mapping):
            raise InvalidInput("decisions must map call ids to decisions", run_id=run_id)
        proposals: dict[str, Proposal] = {}
        for call_id, decision in decisions.items():
            call = paused.call(call_id)
            if call is None:
                raise InvalidInput(
                    f"call {call_id!r} is not paused; the paused calls are "
                    f"{[c.call_id for c in paused.calls]}",
                    run_id=run_id,
                )
            if args_sha256(call.arguments) != call.args_sha256:
                raise ApprovalMismatch(
                    f"the arguments of paused call {call_id!r} do not match its args_sha256; "
                    "decide on the arguments the run paused with",
                    run_id=run_id,
                )
            document = as_document(decision, run_id=run_id)
            wrong = {"external": "approve", "approval": "external_result"}[call.execution]
            if document.decision == wrong:
                needed = (
                    "ExternalResult or Deny" if call.execution == "external" else "Approve or Deny"
                )
                raise InvalidInput(
                    f"call {call_id!r} waits for {call.execution}; decide it with {needed}",
                    run_id=run_id,
                )
            await self._check_edited(paused, call, document)
            proposals[call_id] = Proposal(document, call.args_sha256)
        if durable is None:
            if run_id is not None:
                raise InvalidInput(
                    "this run paused durably; resume it with durable=its DurableBinding",
                    run_id=run_id,
                )
            executor = DirectExecutor(self.model, emit)
            return await run_loop(self, paused.prompt, executor, decisions=proposals, paused=paused)
        if not isinstance(durable, DurableBinding):
            raise InvalidInput("durable must be a zincir.agent.DurableBinding")
        if run_id != durable.run_id:
            raise InvalidInput(
                f"the paused run is {run_id!r}, the binding's run {durable.run_id!r}",
                run_id=durable.run_id,
            )
        return await self._run_durable(paused.prompt, durable, proposals, emit=emit)

    async def _check_edited(
        self, paused: PausedRun, call: PausedCall, document: ApprovalDecision
    ) -> None:
        """An approval's edited arguments against the call's tool schema, before anything is
        stored (InvalidInput naming the tool, the call and the run)."""
        if document.decision != "approve" or document.override_arguments is None:
            return
        context = RunContext(
            run_id=paused.run_id or self.name, step=paused.request_number, agent_name=self.name
        )
        tool = await self.find_tool(call.tool, context)
        if tool is None:
            return  # the loop reports a tool no longer offered
        try:
            tool.validate(document.override_arguments)
        except ToolArgumentsRejected as error:
            raise InvalidInput(
                f"the edited arguments for call {call.call_id!r} of tool {tool.name!r} fail "
                f"its schema: {error.message}; nothing was recorded: approve it again with "
                "arguments that match the schema",
                run_id=paused.run_id,
            ) from None

    async def resume_checkpoint(
        self,
        store: RestartStore,
        run_id: str,
        decisions: Mapping[str, object] | None = None,
        *,
        durable: DurableBinding | None = None,
    ) -> AgentRunResult:
        """Resume the pause saved with ``PausedRun.save_checkpoint`` in any process, without
        the in-memory ``PausedRun``. A durable run also applies the decisions people
        recorded with ``decide`` (an expired approval denies its call)."""
        paused = await load_paused(store, run_id)
        return await self._resume(paused, decisions or {}, durable, None)

    def resume_checkpoint_stream(
        self,
        store: RestartStore,
        run_id: str,
        decisions: Mapping[str, object] | None = None,
        *,
        durable: DurableBinding | None = None,
    ) -> AgentStream:
        """:meth:`resume_checkpoint`, yielding stream parts and tool results as it goes."""
        _check_binding(durable)

        async def run(emit: Emit) -> AgentRunResult:
            paused = await load_paused(store, run_id)
            return await self._resume(paused, decisions or {}, durable, emit)

        return AgentStream(run)

    async def paused_run(self, *, durable: DurableBinding) -> PausedRun | None:
        """The pause the binding's run waits in (rebuilt from its log), or None."""
        if not isinstance(durable, DurableBinding):
            raise InvalidInput("durable must be a zincir.agent.DurableBinding")
        store = durable.run_store()
        row = await store.get_run(durable.run_id)
        if row is None or row["status"] != "running":
            return None
        logged = Logged.from_events(await store.list_events(durable.run_id))
        return await logged.waiting_run(store)

    async def _run_durable(
        self,
        prompt: str,
        binding: DurableBinding,
        proposals: Mapping[str, Proposal] | None = None,
        *,
        emit: Emit | None = None,
    ) -> AgentRunResult:
        store = binding.run_store()
        check_route(self, binding, streaming=emit is not None)
        row = await store.get_run(binding.run_id)
        if row is not None:
            check_prompt(row, prompt)
        earlier: list[Event] = []  # the log read to refuse a conflict before taking the run
        if proposals and row is not None:
            earlier = await store.list_events(binding.run_id)
            _check_conflicts(Logged.from_events(earlier), proposals, binding.run_id)
        if row is not None and (emit is not None or row["status"] != "completed"):
            await _check_same_mode(store, binding, streaming=emit is not None)
        if row is not None and row["status"] == "completed":
            stored = result_from_stored(row["result"], binding.run_id)
            if emit is not None:
                await self._replay(prompt, binding, emit)
            return stored
        ctx, owned = await take_run(
            store,
            binding,
            name=self.name,
            provider=self.model.name,
            exists=row is not None,
            config=run_config(self.name, prompt, binding, stream=emit is not None),
        )
        attempt = telemetry.RunAttempt()
        executor: DurableExecutor | None = None
        try:
            attempt = await telemetry.start_run(
                store,
                binding.run_id,
                f"invoke_agent {self.name}",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.name},
                current=True,
            )
            if row is not None and row["wait_kind"] is not None:
                await store.set_run_wait(ctx.lease, None)  # no longer parked: it runs now
            after = earlier[-1].seq if earlier else 0  # only what taking the run appended
            events = earlier + await store.list_events(binding.run_id, after_seq=after)
            # A run this call created logged its creation as its first event.
            created: str | datetime | None = None if row is None else row["created_at"]
            if created is None and events and events[0].seq == 1:
                created = events[0].created_at
            ctx.seed_guards(events, created_at=created)
            if binding.budget is not None:
                await ctx.set_budget(binding.budget)
            logged = Logged.from_events(events)
            _check_conflicts(logged, proposals or {}, binding.run_id)
            decisions = {cid: Proposal(doc) for cid, doc in logged.proposals.items()}
            recorded = (
                recorded_decisions(
                    await store.list_approvals(binding.run_id, pending=False), store.now()
                )
                if row is not None  # a run created just now has no approvals yet
                else {}
            )
            for call_id, proposal in recorded.items():
                chosen = (proposals or {}).get(call_id)
                if chosen is not None and chosen.decision != proposal.decision:
                    raise ApprovalMismatch(
                        f"call {call_id!r} was decided elsewhere ({proposal.decision.decision}); "
                        f"a different decision ({chosen.decision.decision}) is refused",
                        run_id=binding.run_id,
                    )
                decisions.setdefault(call_id, proposal)
            # A decision in force stays the logged one: its digest is checked when bound.
            decisions.update(
                (call_id, proposal)
                for call_id, proposal in (proposals or {}).items()
                if call_id not in logged.proposals
            )
            executor = DurableExecutor(self, binding, ctx, logged, emit)
            executor.plan_restarts(prompt, events)
            if row is not None:
                executor.plan_history(prompt, stored_config(row), events)
            with executor.streaming():  # a handler run here appends its live deltas
                result = await run_loop(self, prompt, executor, decisions=decisions)
            result = dataclasses.replace(result, run_id=binding.run_id)
            if result.paused is not None:  # parked by the executor when it logged the pause
                if owned:
                    await ctx.close()
                return result
            await executor.stream_result("completed", result.output, None)
            await ctx._complete_json(stored_result(result, binding.run_id))
        except _DETERMINISTIC_FAILURES as error:
            attempt.end(error)
            if executor is not None:
                await _quietly(executor.stream_result("failed", None, _failure_text(error)))
            await _quietly(ctx.fail(_failure_text(error)))
            raise
        except BaseException as error:
            attempt.end(error)
            if owned:  # a lease held by its holder (a worker's context) is its to give up
                await _quietly(ctx.close())
            raise
        finally:
            attempt.end()
            if not owned:
                ctx.end_use()
        return result

    async def _replay(self, prompt: str, binding: DurableBinding, emit: Emit) -> None:
        """Stream a finished run again from its records: nothing is called or written."""
        store = binding.run_store()
        events = await store.list_events(binding.run_id)
        logged = Logged.from_events(events)
        decisions = {cid: Proposal(doc) for cid, doc in logged.proposals.items()}
        executor = DurableExecutor(self, binding, None, logged, emit)
        row = await store.get_run(binding.run_id)
        if row is not None:
            executor.plan_history(prompt, stored_config(row), events)
        await run_loop(self, prompt, executor, decisions=decisions)

    @property
    def all_toolsets(self) -> tuple[Toolset, ...]:
        """Every toolset a run may offer: the agent's and every capability's."""
        return (*self.toolsets, *self.capabilities.values())

    async def resolve_toolsets(
        self, context: RunContext, loaded: Iterable[str] | None = None
    ) -> ResolvedToolsets:
        """Each toolset with the tools it offers for the next request: the agent's, and the
        capabilities ``loaded`` so far (every capability when None: a worker's lookup)."""
        names = self.capabilities if loaded is None else loaded
        toolsets = (*self.toolsets, *(self.capabilities[name] for name in names))
        return [(toolset, await toolset.resolve(context)) for toolset in toolsets]

    def tools_by_name(
        self, resolved: ResolvedToolsets, *, run_id: str | None = None
    ) -> dict[str, Tool]:
        """The tools on offer by name; two tools may not share a name."""
        tools: dict[str, Tool] = {}
        for _, offered in resolved:
            for tool in offered:
                if tool.name in tools:
                    raise InvalidInput(
                        f"two tools are named {tool.name!r}; tool names must be unique",
                        run_id=run_id,
                    )
                tools[tool.name] = tool
        return tools

    async def find_tool(self, name: str, context: RunContext) -> Tool | None:
        """The tool called ``name`` as offered in ``context`` (a worker's lookup)."""
        return self.tools_by_name(await self.resolve_toolsets(context)).get(name)

    async def deliver(self, event: EventDelivery) -> None:
        """Hand an event to the agent's event sink, if it has one."""
        if self.event_sink is not None:
            delivered = self.event_sink(event)
            if inspect.isawaitable(delivered):
                await delivered


def _check_binding(durable: object) -> None:
    if durable is not None and not isinstance(durable, DurableBinding):
        raise InvalidInput("durable must be a zincir.agent.DurableBinding")


class AgentStream:
    """``async for event in agent.run_stream(...)``: stream parts and tool results as they
    come; afterwards ``result`` holds the run's result (its ``paused`` when it paused)."""

    def __init__(self, run: Callable[[Emit], Awaitable[AgentRunResult]]) -> None:
        self._run = run
        self._result: AgentRunResult | None = None
        self._started = False

    @property
    def result(self) -> AgentRunResult:
        """The run's result; InvalidInput before the stream was consumed to its end."""
        if self._result is None:
            raise InvalidInput("iterate the stream to its end before reading its result")
        return self._result

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._started:
            raise InvalidInput("a run stream can be iterated once")
        self._started = True
        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()

        async def produce() -> AgentRunResult:
            try:
                return await self._run(queue.put)
            finally:
                queue.put_nowait(None)

        task = asyncio.ensure_future(produce())
        try:
            while (event := await queue.get()) is not None:
                yield event
            self._result = await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


async def _check_same_mode(store: Store, binding: DurableBinding, *, streaming: bool) -> None:
    """A run started streamed (``model.stream``) continues streamed, and one started with
    ``run`` continues unstreamed: the other step would find no records and ask the model
    again."""
    other = MODEL_REQUEST if streaming else MODEL_STREAM
    key = OperationKey(binding.run_id, binding.step_id(other), 0)
    if await store.get_operation(key) is None:
        return
    if streaming:
        hint = "run, resume or resume_checkpoint"
        started = "run()"
    else:
        hint = "run_stream or resume_checkpoint_stream"
        started = "run_stream()"
    raise InvalidInput(
        f"this run was started with {started}; continue it with {hint}, so that its "
        "stored model responses replay",
        run_id=binding.run_id,
    )


def _check_conflicts(logged: Logged, proposals: Mapping[str, Proposal], run_id: str) -> None:
    """A call keeps the decision in force in its round: a different proposal fails closed
    (a reopened call takes a new one)."""
    for call_id, proposal in proposals.items():
        known = logged.proposals.get(call_id)
        if known is not None and known != proposal.decision:
            raise ApprovalMismatch(
                f"call {call_id!r} was already decided ({known.decision}); a second, "
                f"different decision ({proposal.decision.decision}) is refused",
                run_id=run_id,
            )


def _failure_text(error: BaseException) -> str:
    """The run's stored error: a persisted failure by its stable name first."""
    if isinstance(error, DurableOperationFailed):  # its name once, then its message
        return f"{error.error}: {error.message}" if error.message else error.error
    return f"{type(error).__name__}: {error}"


async def _quietly(step: Awaitable[Any]) -> None:
    """Run a clean-up step whose own failure must not hide the error being raised."""
    with contextlib.suppress(ZincirError):
        await step
