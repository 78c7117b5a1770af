"""The durable path: each model request and tool call is an Invocation the runtime executes.

The agent process never calls the model or a tool itself here. Each response and tool
result is logged on the run (like an ``AgentContext`` loop), skipping what a previous
attempt already logged, so a replay adds nothing twice. A LocalRuntime on the run's store
appends the entry in the record's own transaction (``execute_and_log``); otherwise the loop
logs it just after, in a commit that does not wait for the disk: it follows the durable
record it is made from, so a power loss can only take the tail of such entries, and the
replay that follows logs them again. Pauses and approval decisions are not rebuilt from
records, so they are written durably. A pause's event names the model request whose stored
input and response are its conversation, instead of holding it (a run paused every turn
would store its conversation once a pause); one written by an earlier version holds it.

A paused call is decided in rounds: round 0 at its call's sequence, and each time a decision
no longer binds the arguments that would run (the tool's schema changed, an override now
validates differently) the call is paused again and reopened (``approval_reopened``) for the
next round, whose ``approval.resume`` and approved ``tool.call`` take the next attempt of
those sequences.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _telemetry as telemetry
from .._errors import (
    ApprovalMismatch,
    InputDrift,
    InvalidDocument,
    InvalidInput,
    MissingDurableHandler,
    RecordFormatError,
    RunTerminal,
    Suspend,
)
from .._json import dumps, loads_strict
from .._replay import Item, Recorded, operation_item
from ..contract import (
    Failure,
    Invocation,
    OperationKind,
    Outcome,
    Record,
    Success,
    Suspended,
    SuspendReason,
    decode_record,
)
from ..contract.payloads import (
    ApprovalDecision,
    ApprovalRequest,
    ClientIdentity,
    Document,
    McpRequest,
    Message,
    ModelRequest,
    ModelResponse,
    RetryDelay,
    RunContext,
    ToolCallPart,
    ToolOutput,
    ToolRequest,
    ToolReturnPart,
    Usage,
    stream_parts,
)
from ..durable import LocalRuntime
from ..runs import AgentContext, ToolCall, response_entry, tool_result_entry
from ..runs._budget import Moment
from ..store import Event, LogEntry, NewApproval, NewEvent, OperationKey, ResponseEntry, Store
from ..streams import MESSAGE, PAUSED, TOOL_RESULT
from ..streams._writer import StreamWriter, writing
from ._approval import APPROVAL_TOPIC, Execution, PausedRun, args_sha256
from ._binding import DurableBinding
from ._conversation import Conversation, add_usage, response_text, tool_calls
from ._describe import describe_operation, drift_reason
from ._errors import DurableOperationFailed
from ._fork import FORKED, history_tools, missing_tools
from ._identity import (
    APPROVAL_RESUME,
    ATTEMPT_STRIDE,
    MAX_CALLS_PER_RESPONSE,
    MCP_REQUEST,
    MODEL_REQUEST,
    MODEL_STREAM,
    RETRY_DELAY,
    TOOL_CALL,
    attempt_sequence,
    retry_sequence,
    tool_sequence,
)
from ._loop import Deferred, PlannedCall, Refused, Restart
from ._policies import result_digest
from ._preflight import ResolvedToolsets, check_route
from ._rate_limit import model_rate_limit, rate_limit_scope
from ._stream import Emit, discard
from ._tools import Tool, ToolErrors, ToolOrigin

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["DurableExecutor", "Logged", "success"]


D = TypeVar("D", bound=Document)

PAUSED_EVENT = "agent_paused"
LOOP_STEPS = (MODEL_REQUEST, MODEL_STREAM, TOOL_CALL, MCP_REQUEST, RETRY_DELAY, APPROVAL_RESUME)
DECIDED_EVENT = "approval_decided"
REOPENED_EVENT = "approval_reopened"


@dataclass(slots=True)
class Logged:
    """What the run's log already holds: how many responses, which tool results, the
    decision in force on each decided call (and the argument digest it binds), each
    reopened call's decision round, the latest pause (and the model request holding its
    conversation when its event does not), and the operations recorded (which the run's new
    owner checks its requests against).

    A reopened call's decision is no longer in force: it waits for one in its new round."""

    responses: int = 0
    results: set[str] = field(default_factory=set)
    proposals: dict[str, ApprovalDecision] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    unshown: set[str] = field(default_factory=set)
    shown: dict[str, str] = field(default_factory=dict)  # call id → digest of its result
    paused: PausedRun | None = None
    conversation: OperationKey | None = None
    recorded: Recorded = field(default_factory=Recorded)

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> Logged:
        logged = cls()
        for event in events:
            payload = event.payload
            if event.type == "llm_call":
                logged.responses += 1
            elif event.type == "tool_result" and isinstance(payload, dict):
                logged.results.add(str(payload.get("id")))
                logged.shown[str(payload.get("id"))] = result_digest(
                    payload.get("result"), bool(payload.get("is_error"))
                )
            elif event.type == PAUSED_EVENT and isinstance(payload, dict):
                logged.paused, logged.conversation = _read_pause(payload, event.run_id)
            elif event.type == DECIDED_EVENT and isinstance(payload, dict):
                call_id = str(payload["call_id"])
                logged.proposals[call_id] = ApprovalDecision.from_dict(payload["proposed"])
                logged.bound[call_id] = str(payload["args_sha256"])
                if "model_args_sha256" not in payload:  # logged before edits were shown
                    logged.unshown.add(call_id)
            elif event.type == REOPENED_EVENT and isinstance(payload, dict):
                logged.reopen(str(payload["call_id"]), int(payload["round"]))
            else:
                logged.recorded.add(event)
        return logged

    def reopen(self, call_id: str, round_: int) -> None:
        """Decision round ``round_`` of ``call_id`` begins: its previous decision is retired."""
        self.rounds[call_id] = round_
        self.proposals.pop(call_id, None)
        self.bound.pop(call_id, None)

    def waiting(self) -> PausedRun | None:
        """The latest pause, unless every call of it was decided since."""
        paused = self.paused
        if paused is None or all(c.call_id in self.proposals for c in paused.calls):
            return None
        return paused

    async def waiting_run(self, store: Store) -> PausedRun | None:
        """:meth:`waiting` with its conversation: read from ``store``'s record of the model
        request its event names, when the event does not hold it."""
        paused = self.waiting()
        if paused is None or self.conversation is None:
            return paused
        messages = await _paused_messages(store, self.conversation)
        return dataclasses.replace(paused, messages=messages)


class DurableExecutor:
    """Routes every side effect through ``binding.runtime.execute`` and logs it on the run."""

    def __init__(
        self,
        agent: Agent,
        binding: DurableBinding,
        ctx: AgentContext | None,
        logged: Logged,
        emit: Emit | None = None,
    ) -> None:
        self.emit = emit
        self.agent = agent
        self.binding = binding
        self.ctx = ctx
        self.logged = logged
        if ctx is not None:  # the log was read as the run was taken: no second read
            ctx.replay.seed(logged.recorded)
        self.run_id: str | None = binding.run_id
        self.wake_at: datetime | None = None
        self.refused: dict[str, str] = {}  # call id -> the digest its refused decision binds
        # The calls claimed with the last response, by (request, position), until they run.
        self.planned: dict[tuple[int, int], tuple[PlannedCall, Invocation]] = {}
        # The turns a replaying loop may skip, and the record of the model request it went
        # on from, until that request is made (see restart_at).
        self.restarts: _Restarts | None = None
        self.restarted: tuple[int, Record] | None = None
        # A fork's fixed history: its turn and the log read as the run was taken (see
        # plan_history).
        self.history: tuple[int, Sequence[Event]] | None = None
        self.prompt = ""
        # The last model request answered: its number and operation (a pause's event names it).
        self.answered: tuple[int, OperationKey] | None = None
        # The run's durable stream (a streamed run's owner writes it), and the model request
        # whose response's tools run now (their results name it).
        self.stream: StreamWriter | None = None
        if ctx is not None and emit is not None and binding.durable_stream:
            self.stream = StreamWriter(ctx.store, ctx.lease, check=ctx.check_lease)
        self.request = 0

    def streaming(self) -> contextlib.AbstractContextManager[None]:
        """The loop's block: its stream writer is the current one, so a ``model.stream``
        handler executed in this process appends its live deltas to it."""
        return writing(self.stream)

    async def stream_result(self, status: str, output: str | None, error: str | None) -> None:
        """Append the run's ``result`` item (its last) before the run is completed or
        failed; a replay finds it there and appends nothing."""
        if self.stream is None:
            return
        payload: dict[str, Any] = {"status": status}
        if output is not None:
            payload["output"] = output
        if error is not None:
            payload["error"] = error
        try:
            await self.stream.result(payload)
        finally:
            self.stream.close()

    def plan_restarts(self, prompt: str, events: Sequence[Event]) -> None:
        """Plan the turns this run's loop may skip as it replays (see :meth:`restart_at`)
        from the log: its recorded operations, responses, results and pauses. Nothing is
        skipped on another runtime or store, with a stream someone reads or hooks (they
        observe replayed turns), or with a log it cannot place."""
        agent, binding, ctx, logged = self.agent, self.binding, self.ctx, self.logged
        runtime = binding.runtime
        if (
            ctx is None
            or self.emit not in (None, discard)
            or agent.hooks
            or not isinstance(runtime, LocalRuntime)
            or runtime.store is not ctx.store
        ):
            return
        steps = {binding.step_id(step): step for step in LOOP_STEPS}
        turns: list[tuple[Item, int]] = []
        ran: set[int] = set()  # the tool sequences with a record
        last = -1
        for item in logged.recorded.order:
            step = steps.get(item.name)
            if item.kind != "operation" or step is None:
                return
            base = item.sequence % ATTEMPT_STRIDE
            asked = step in (MODEL_REQUEST, MODEL_STREAM)
            turn = base if asked else base // MAX_CALLS_PER_RESPONSE
            turns.append((item, turn))
            if step in (TOOL_CALL, MCP_REQUEST):
                ran.add(base)
            elif step == self._model_step() and last < turn <= logged.responses:
                last = turn
        # Without tools run in this process, an error result of a call that has no record
        # and never paused is a rejected call, so its tool's failure count is known.
        exact = not any(
            toolset.durable_origins is None or ToolOrigin.WORKFLOW in toolset.durable_origins
            for toolset in agent.all_toolsets
        )
        plan = _plan_restarts(events, last, ran, exact=exact)
        if plan is not None:
            self.restarts = _Restarts(prompt, turns, *plan)

    def plan_history(self, prompt: str, config: Mapping[str, Any], events: Sequence[Event]) -> None:
        """A fork's turns before its fork turn are fixed history, made by its source's
        agent: the loop goes on at that turn over the stored conversation (see
        :meth:`restart_at`), on a LocalRuntime on the run's store."""
        forked = config.get(FORKED)
        turn = forked.get("turn") if isinstance(forked, dict) else None
        runtime = self.binding.runtime
        if (
            isinstance(turn, int)
            and turn >= 1
            and isinstance(runtime, LocalRuntime)
            and runtime.store is self.binding.run_store()
        ):
            self.history = (turn, events)
            self.prompt = prompt
        if (
            isinstance(turn, int)
            and isinstance(forked, dict)
            and forked.get("agent") != self.agent.name
        ):
            missing = missing_tools(self.agent, history_tools(events, turn))
            if missing:
                raise InvalidInput(
                    f"this fork's first {turn} turns called tools agent {self.agent.name!r} "
                    f"does not offer ({', '.join(missing)}); continue it with an agent that "
                    "offers them",
                    run_id=self.binding.run_id,
                )

    async def restart_at(self, number: int) -> Restart | None:
        """Where the loop goes on when it is about to build model request ``number``:
        the next turn it must replay (one that paused, whose decided calls are checked
        against their decisions, or one whose tools' failure counts the log does not tell),
        else the last model request with a record. The conversation up to that request is
        its stored input, the usage and failure counts come from the log, and the
        operations of the turns between count as replayed. Replaying that request checks it
        for drift: the prompt and instructions open its conversation, the tools and model
        are in it. None: the loop builds this request itself."""
        if self.history is not None and number < self.history[0]:
            turn, events = self.history
            self.history = None
            restart = await self._history_restart(turn, events)
            if restart is not None:
                return restart
        plan, ctx, binding = self.restarts, self.ctx, self.binding
        if plan is None or ctx is None or number in plan.replayed or number >= plan.last:
            return None
        target = min((turn for turn in plan.replayed if turn > number), default=plan.last)
        self.restarts = None  # until this restart is known to be sound
        key = OperationKey(binding.run_id, binding.step_id(self._model_step()), target)
        row = await ctx.store.get_operation(key)
        if row is None or row.status != "completed" or row.record is None:
            return None
        try:
            record = decode_record(row.record)
            request = ModelRequest.from_json(record.invocation.input_json)
        except (InvalidDocument, RecordFormatError):
            return None  # the replay reports it where it meets it
        opening = Conversation(self.agent.instructions, plan.prompt).messages
        if list(request.messages[: len(opening)]) != opening:
            return None  # the replay from the start names what drifted
        usage = Usage()
        for one in plan.usages[:target]:
            usage = add_usage(usage, one)
        ctx.replay.supersede(item for item, turn in plan.turns if number <= turn < target)
        self.restarts = plan
        self.restarted = (target, record)
        return Restart(target, tuple(request.messages), usage, plan.failures_at(target))

    async def _history_restart(self, turn: int, events: Sequence[Event]) -> Restart | None:
        """A fork's loop state at model request ``turn``: the input of request ``turn - 1``
        (its opening, instructions and prompt, this agent's), that request's response, its
        tools' results from the log and their follow-up messages from their records. None
        when that turn did not end with every call's result (the loop replays instead)."""
        binding, run_id = self.binding, self.binding.run_id
        store = binding.run_store()
        model_step, tool_step = binding.step_id(self._model_step()), binding.step_id(TOOL_CALL)
        tool_steps = {tool_step, binding.step_id(MCP_REQUEST)}
        model_key: OperationKey | None = None
        outputs: dict[int, OperationKey] = {}  # position -> the tool record of turn - 1
        ran: set[int] = set()  # the tool sequences with a record
        responses: list[dict[str, Any]] = []
        results: dict[str, dict[str, Any]] = {}
        end = None  # the seq of the first event of model request ``turn``
        for event in events:
            payload = event.payload
            if not isinstance(payload, dict):
                return None
            if event.type == "operation_completed":
                step, sequence = payload.get("step_id"), payload.get("sequence")
                if not isinstance(sequence, int):
                    continue
                base = sequence % ATTEMPT_STRIDE
                if step == model_step and base == turn and end is None:
                    end = event.seq
                if end is not None:
                    continue
                done = payload.get("outcome") == "success"
                if step == model_step and base == turn - 1 and done:
                    model_key = OperationKey(run_id, model_step, sequence)
                elif step in tool_steps:
                    ran.add(base)
                    if step == tool_step and done and base // MAX_CALLS_PER_RESPONSE == turn - 1:
                        outputs[base % MAX_CALLS_PER_RESPONSE] = OperationKey(
                            run_id, tool_step, sequence
                        )
            elif end is None and event.type == "llm_call":
                responses.append(payload)
            elif end is None and event.type == "tool_result":
                results[str(payload.get("id"))] = payload
        if model_key is None or len(responses) < turn:
            return None
        row = await store.get_operation(model_key)
        if row is None or row.status != "completed" or row.record is None:
            return None
        record = decode_record(row.record)
        where = f"{model_key.step_id} #{model_key.sequence}"
        request = _read(ModelRequest, record.invocation.input_json, where, "model", run_id)
        response = _read(ModelResponse, success(record), where, "model", run_id)
        calls = tool_calls(response)
        if not calls or any(call.tool_call_id not in results for call in calls):
            return None  # a final answer, or a turn cut off: nothing to go on from
        messages = list(request.messages)
        first_user = next((i for i, m in enumerate(messages) if m.role == "user"), None)
        if first_user is None:
            return None
        conversation = Conversation(self.agent.instructions, self.prompt)
        conversation.add_messages(messages[first_user + 1 :])
        conversation.add_response(response)
        conversation.add_tool_returns(
            ToolReturnPart(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                content=results[call.tool_call_id].get("result"),
                is_error=results[call.tool_call_id].get("is_error") is True,
            )
            for call in calls
        )
        for position in sorted(outputs):
            tool_row = await store.get_operation(outputs[position])
            if tool_row is None or tool_row.record is None:
                continue
            tool_record = decode_record(tool_row.record)
            if isinstance(tool_record.outcome, Success):
                output = _read(ToolOutput, tool_record.outcome.output_json, where, "tool", run_id)
                conversation.add_messages(output.follow_up_messages)
        usage = Usage()
        failures: dict[str, int] = {}
        for number, logged in enumerate(responses[:turn]):
            try:
                usage = add_usage(usage, Usage.from_dict(logged.get("usage") or {}))
            except InvalidDocument:
                return None
            listed = logged.get("tool_calls")
            named = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
            worked: set[str] = set()
            for position, call in enumerate(named):
                name, result = str(call.get("name")), results.get(str(call.get("id")), {})
                sequence = number * MAX_CALLS_PER_RESPONSE + position
                if result.get("is_error") is True and sequence not in ran:
                    failures[name] = failures.get(name, 0) + 1  # a call refused before it ran
                else:
                    worked.add(name)
            for name in worked:
                failures.pop(name, None)
        if self.ctx is not None:  # the history's work is skipped by design
            limit = end if end is not None else (events[-1].seq + 1 if events else 0)
            recorded = [e for e in events if e.seq < limit]
            history = Recorded()
            for event in recorded:
                history.add(event)
            self.ctx.replay.supersede(history.order)
        return Restart(turn, tuple(conversation.messages), usage, failures)

    def _model_step(self) -> str:
        """The step of this run's model requests: streamed or not."""
        return MODEL_REQUEST if self.emit is None else MODEL_STREAM

    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None:
        """Re-check the route (the tools on offer may have changed), the run's budget and
        spin rules (BudgetExceeded, SpinDetected: before the request is made)."""
        check_route(self.agent, self.binding, resolved, streaming=self.emit is not None)
        await self._guard("model")

    async def before_tools(self, number: int) -> None:
        """The run's budget and spin rules, before the response's logged tool calls run."""
        await self._guard("tools")

    async def _guard(self, before: Moment) -> None:
        ctx = self.ctx
        if ctx is None:
            return  # a finished run's replay: nothing runs
        await ctx.check_budget(before)
        if self.binding.spin is not None:
            await ctx.check_spin(self.binding.spin)

    async def model_request(
        self,
        number: int,
        request: ModelRequest,
        *,
        attempt: int = 0,
        ahead: Callable[[ModelResponse], Sequence[PlannedCall]] | None = None,
    ) -> ModelResponse:
        """Model request ``number`` as ``model.request`` #number (a retry adds its stride);
        when streaming, as ``model.stream`` #number, whose stored response is passed on as
        its normalised parts whatever chunks the provider sent. ``ahead(response)`` lists
        the calls the loop will run from a new response: a LocalRuntime on the run's store
        claims them with the response's record (see :meth:`release_ahead`)."""
        sequence = attempt_sequence(number, attempt, run_id=self.binding.run_id)
        step, kind = MODEL_REQUEST, OperationKind.MODEL_REQUEST
        if self.emit is not None:
            step, kind = MODEL_STREAM, OperationKind.MODEL_STREAM
        self.request = number

        where = f"{self.binding.step_id(step)} #{sequence}"

        def read(output: str) -> ModelResponse:
            return _read(ModelResponse, output, where, "model", self.binding.run_id)

        def log(record: Record) -> list[LogEntry]:
            if number < self.logged.responses or not isinstance(record.outcome, Success):
                return []
            return [self._response_entry(read(record.outcome.output_json))]

        def calls_ahead(record: Record) -> list[Invocation]:
            if ahead is None or not isinstance(record.outcome, Success):
                return []
            self.planned = {
                (number, planned.position): (planned, self._tool_invocation(number, planned))
                for planned in ahead(read(record.outcome.output_json))
                if planned.tool.origin is ToolOrigin.APPLICATION
            }
            return [invocation for _, invocation in self.planned.values()]

        invocation = self._invocation(step, sequence, kind, request)
        restarted, self.restarted = self.restarted, None
        if (
            self.ctx is not None
            and restarted is not None
            and restarted[0] == number
            and restarted[1].invocation == invocation
        ):
            # The request the loop restarted at, rebuilt byte for byte (no drift): its
            # record, read and checked by restart_at, replays without a second read.
            self.ctx.replay.supersede([operation_item(invocation.step_id, sequence)])
            record, logged = restarted[1], False
        else:
            if self.stream is not None:  # a dead or failed attempt's deltas are void
                await self.stream.void_open(number)
            if model_rate_limit(self.agent.model) is None:
                record, logged = await self._run(invocation, log, calls_ahead)
            else:  # the handler takes the limit's capacity in the run's store
                with rate_limit_scope(self._rate_store(), invocation.run_id):
                    record, logged = await self._run(invocation, log, calls_ahead)
        response = read(success(record))
        if self.stream is not None:
            body = {"request": number, "response": response.to_dict()}
            await self.stream.put(MESSAGE, body, f"message:{number}")
        self.answered = (number, OperationKey(invocation.run_id, invocation.step_id, sequence))
        if logged:
            self.logged.responses = number + 1
        if self.emit is not None:
            for part in stream_parts(response):
                await self.emit(part)
        return response

    def _rate_store(self) -> Store | None:
        """The store holding the run, where its model's rate limit is counted."""
        if self.ctx is not None:
            return self.ctx.store
        with contextlib.suppress(InvalidInput):
            return self.binding.run_store()
        return None

    async def release_ahead(self) -> None:
        """Release the claims made with the last response for calls that did not run."""
        unused, self.planned = self.planned, {}
        runtime = self.binding.runtime
        if unused and isinstance(runtime, LocalRuntime):
            await runtime.release_ahead(invocation for _, invocation in unused.values())

    async def wait_retry(self, number: int, delay: RetryDelay) -> None:
        """The timer as ``retry.delay`` #number*1000+retry; the worker waits, never this
        process."""
        sequence = retry_sequence(number, delay.retry, run_id=self.binding.run_id)
        await self._execute(RETRY_DELAY, sequence, OperationKind.RETRY_DELAY, delay)

    async def wait_tool_retry(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        delay: RetryDelay,
        *,
        approval: ApprovalDecision | None = None,
        attempt: int = 0,
    ) -> None:
        """The timer before a tool call's attempt ``attempt`` as ``retry.delay`` at that
        attempt's sequence of the call; the worker waits, never this process."""
        sequence = self._tool_attempt(number, position, call, approval, attempt)
        await self._execute(RETRY_DELAY, sequence, OperationKind.RETRY_DELAY, delay)

    def _tool_attempt(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        approval: ApprovalDecision | None,
        attempt: int,
    ) -> int:
        """The sequence of a tool call's attempt (an approved one after its rounds)."""
        run_id = self.binding.run_id
        if approval is not None:
            attempt += self.logged.rounds.get(call.tool_call_id, 0)
        return attempt_sequence(
            tool_sequence(number, position, run_id=run_id), attempt, run_id=run_id
        )

    async def run_tool(
        self,
        number: int,
        position: int,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        retry: int,
        *,
        approval: ApprovalDecision | None = None,
        attempt: int = 0,
        errors: ToolErrors = "report",
        returns: Callable[[ToolOutput], ToolOutput | None] | None = None,
    ) -> ToolOutput | Deferred:
        """The call as ``tool.call`` (or ``mcp.request``) #number*1000+position; a later
        attempt (an approved call whose tool first asked for approval, a retry) adds its
        stride, and so does each decision round before the one that approved it. ``errors``
        is decided by the worker, which serves the same agent; ``returns`` (the tool
        policies) shapes the output read from the record (which keeps the tool's own)
        before it is logged and returned."""
        run_id = self.binding.run_id
        if approval is not None:
            attempt += self.logged.rounds.get(call.tool_call_id, 0)
        sequence = self._tool_attempt(number, position, call, None, attempt)

        where = f"tool call {call.tool_call_id!r} ({call.tool_name})"
        route = tool.mcp_route if tool.origin is ToolOrigin.MCP else None

        def read(output: str) -> ToolOutput:
            if route is not None:
                return route.output(call, output)
            return _read(ToolOutput, output, where, "tool", run_id)

        def shown(output: str) -> ToolOutput | None:
            """What the model reads; None when a tool policy failed (the loop raises it)."""
            return read(output) if returns is None else returns(read(output))

        def log(record: Record) -> list[LogEntry]:
            outcome = record.outcome
            if call.tool_call_id in self.logged.results or not isinstance(outcome, Success):
                return []
            output = shown(outcome.output_json)
            if output is None:
                return []
            return [
                tool_result_entry(
                    run_id, call.tool_call_id, output.content, is_error=output.is_error
                )
            ]

        if tool.origin is ToolOrigin.MCP:
            document: Document = (
                route.request(call, arguments)
                if route is not None
                else McpRequest(
                    method="tools/call",
                    params={"name": call.tool_name, "arguments": arguments},
                    client=ClientIdentity(name=self.agent.name),
                )
            )
            outcome, logged = await self._outcome(
                MCP_REQUEST,
                sequence,
                OperationKind.MCP_REQUEST,
                document,
                log=log,
                handler_id=None if route is None else route.handler_id,
            )
        else:
            planned = PlannedCall(position, tool, call, arguments, retry)
            early = self.planned.pop((number, position), None)
            if early is not None and approval is None and attempt == 0 and early[0] == planned:
                invocation = early[1]  # the invocation claimed with the response
            else:
                invocation = self._tool_invocation(
                    number, planned, attempt=attempt, approval=approval
                )
            outcome, logged = await self._run(invocation, log)
        deferred = _deferral(outcome)
        if deferred is not None:
            return deferred
        output = shown(success(outcome)) or read(success(outcome))
        if logged:
            self.logged.results.add(call.tool_call_id)
        return output

    async def decide(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        arguments: dict[str, Any],
        execution: Execution,
        proposed: ApprovalDecision,
    ) -> ApprovalDecision | Refused:
        """Route the proposed decision through ``approval.resume`` at the call's sequence
        (plus a stride per earlier decision round); the persisted decision is the one
        applied. A decision in force that was made on other arguments is Refused."""
        run_id = self.binding.run_id
        call_id = call.tool_call_id
        document = ApprovalRequest(
            call=call, arguments=arguments, execution=execution, proposed=proposed
        )
        first = tool_sequence(number, position, run_id=run_id)
        round_ = self.logged.rounds.get(call_id, 0)
        sequence = attempt_sequence(first, round_, run_id=run_id)
        if round_ and self.ctx is not None:  # the earlier rounds' decisions are retired
            step_id = self.binding.step_id(APPROVAL_RESUME)
            self.ctx.replay.supersede(
                operation_item(step_id, attempt_sequence(first, earlier, run_id=run_id))
                for earlier in range(round_)
            )
        try:
            output = await self._execute(
                APPROVAL_RESUME, sequence, OperationKind.APPROVAL_RESUME, document
            )
        except InputDrift:
            bound = self.logged.bound.get(call_id)
            if bound is not None:  # same proposal, so the arguments changed since
                return self._refuse(call, bound, args_sha256(arguments))
            raise ApprovalMismatch(
                f"call {call.tool_call_id!r} ({call.tool_name}) was already decided with "
                "another proposal or other arguments; a decided call keeps its decision",
                run_id=run_id,
            ) from None
        where = f"{self.binding.step_id(APPROVAL_RESUME)} #{sequence}"
        return _read(ApprovalDecision, output, where, "approval", run_id)

    async def bind_approval(
        self,
        call: ToolCallPart,
        proposed: ApprovalDecision,
        digest: str,
        *,
        model_digest: str | None = None,
    ) -> Refused | None:
        """Log the decision with the digest of the arguments it covers (for an approval, the
        ones it lets run) and its round; one logged for other arguments is Refused. An
        approval with edited arguments (``model_digest``: the digest of the model's) logs
        both digests, and its approval stores the edited one."""
        call_id = call.tool_call_id
        bound = self.logged.bound.get(call_id)
        if bound is not None:
            return None if bound == digest else self._refuse(call, bound, digest)
        ctx = self._owner()
        ctx.check_lease()
        run_id = self.binding.run_id
        event = {
            "call_id": call_id,
            "proposed": proposed.to_dict(),
            "args_sha256": digest,
            "round": self.logged.rounds.get(call_id, 0),
        }
        if model_digest is not None:
            event["model_args_sha256"] = model_digest
            event["edited_args_sha256"] = digest
        body = dumps(event, what=DECIDED_EVENT, run_id=run_id)
        await ctx.store.settle_approval(
            ctx.lease,
            call_id,
            proposed.to_json(),
            [NewEvent(DECIDED_EVENT, body)],
            edited_args_sha256=None if model_digest is None else digest,
            decided_by=proposed.decided_by,
        )
        self.logged.proposals[call_id] = proposed
        self.logged.bound[call_id] = digest
        return None

    def shown(self, call_id: str) -> str | None:
        """The digest of the result the run's log held for ``call_id`` when it was opened
        (``_policies.result_digest``), or None."""
        return self.logged.shown.get(call_id)

    def shows_edit(self, call_id: str) -> bool:
        """Whether the model's next request shows the call with its edited arguments: not
        for a decision logged before it did (its recorded requests show the model's)."""
        return call_id not in self.logged.unshown

    def set_aside(self, call: ToolCallPart, bound: str, digest: str, problem: str) -> Refused:
        """Set aside a recorded decision whose edited arguments (digest ``bound``) fail the
        tool's schema: the call is reopened for a new decision round when the run pauses."""
        return dataclasses.replace(self._refuse(call, bound, digest), problem=problem)

    def _refuse(self, call: ToolCallPart, bound: str, digest: str) -> Refused:
        """Refuse the call's decision in force (bound to ``bound``): the call is paused for a
        new round. A call that already has its result is never decided again."""
        call_id = call.tool_call_id
        if call_id in self.logged.results:
            raise ApprovalMismatch(
                f"call {call_id!r} ({call.tool_name}) has its result under a decision for "
                f"arguments {bound} but would now run with {digest}; a call that has its "
                "result is not decided again",
                run_id=self.binding.run_id,
            )
        self.refused[call_id] = bound
        return Refused(bound, digest)

    async def record_pause(self, paused: PausedRun) -> None:
        """Log the pause, so a new process can rebuild it (unless it is the logged one), and
        open an approval per paused call, so a person can decide it from anywhere
        (``pending_approvals`` / ``decide``); then park the run until a decision arrives or
        ``wake_at``, the earliest expiry.

        A call whose decision was refused, or that the pause lists with other arguments than
        the logged one did, is reopened for its next decision round: its approval is opened
        at that round's sequence (which replaces the old row and clears its decision)."""
        if self.ctx is None and _same_pause(self.logged.paused, paused) and not self.refused:
            return  # a replay of a finished run passing its old pause
        ctx = self._owner()
        ctx.check_lease()
        run_id = self.binding.run_id
        logged = self.logged
        events = []
        conversation = self._conversation_of(paused)
        if not _same_pause(logged.paused, paused):
            payload = paused.to_dict()
            if conversation is not None:  # the request's record holds it: not stored again
                del payload["messages"]
                payload["conversation"] = {
                    "step_id": conversation.step_id,
                    "sequence": conversation.sequence,
                }
            body = dumps(payload, what=PAUSED_EVENT, run_id=run_id)
            events.append(NewEvent(PAUSED_EVENT, body))
            logged.conversation = conversation
        rounds: dict[str, int] = {}
        for call in paused.calls:
            call_id = call.call_id
            rounds[call_id] = logged.rounds.get(call_id, 0)
            listed = None if logged.paused is None else logged.paused.call(call_id)
            replaced = self.refused.get(call_id)
            if replaced is None and listed is not None and listed.args_sha256 != call.args_sha256:
                replaced = listed.args_sha256
            if replaced is not None:
                rounds[call_id] += 1
                reopened = {
                    "call_id": call_id,
                    "round": rounds[call_id],
                    "args_sha256": call.args_sha256,
                    "replaces": replaced,
                }
                events.append(
                    NewEvent(REOPENED_EVENT, dumps(reopened, what=REOPENED_EVENT, run_id=run_id))
                )
        timeout = self.agent.approval_timeout
        expires = None if timeout is None else ctx.store.now() + timeout
        approvals = [
            NewApproval(
                run_id=run_id,
                call_id=call.call_id,
                tool=call.tool,
                arguments_json=dumps(dict(call.arguments), what="arguments", run_id=run_id),
                args_sha256=call.args_sha256,
                sequence=attempt_sequence(call.sequence, rounds[call.call_id], run_id=run_id),
                execution=call.execution,
                expires_at=expires,
            )
            for call in paused.calls
        ]
        calls = [(call.call_id, call.tool) for call in paused.calls]
        with telemetry.pause_span(run_id, calls, expires):
            opened = await ctx.store.open_approvals(ctx.lease, approvals, events)
        for call_id, round_ in rounds.items():
            if round_ != logged.rounds.get(call_id, 0):
                logged.reopen(call_id, round_)
        if self.stream is not None:
            request, round_ = paused.request_number, max(rounds.values(), default=0)
            item = {"request": request, "calls": paused.to_dict()["calls"]}
            await self.stream.put(PAUSED, item, f"paused:{request}:{round_}")
        self.refused.clear()
        logged.paused = paused
        waiting = [row.expires_at for row in opened if row.decision_json is None]
        deadlines = [at for at in waiting if at is not None]
        self.wake_at = min(deadlines) if deadlines else None
        # Parked: a ResumeWorker leaves the run alone until a decision arrives (or the first
        # approval expires, which denies that call).
        await ctx.store.set_run_wait(ctx.lease, "message", APPROVAL_TOPIC, self.wake_at)

    def _conversation_of(self, paused: PausedRun) -> OperationKey | None:
        """The model request whose record in the run's store holds ``paused``'s messages (its
        input's, then its response), or None: a runtime that keeps its records elsewhere."""
        runtime, ctx, answered = self.binding.runtime, self.ctx, self.answered
        if (
            ctx is None
            or answered is None
            or answered[0] != paused.request_number
            or not isinstance(runtime, LocalRuntime)
            or runtime.store is not ctx.store
        ):
            return None
        return answered[1]

    def _owner(self) -> AgentContext:
        """The context owning the run; a replay of a finished run has none to write with."""
        if self.ctx is None:
            raise RunTerminal(
                "the run is finished, yet replaying it found something not in its log; "
                "its records were changed outside zincir",
                run_id=self.binding.run_id,
            )
        return self.ctx

    def _response_entry(self, response: ModelResponse) -> ResponseEntry:
        return response_entry(
            self.binding.run_id,
            response_text(response),
            [
                ToolCall(c.tool_call_id, c.tool_name, dict(c.arguments))
                for c in tool_calls(response)
            ],
            response.finish_reason,
            usage=response.usage.to_dict(),
            model=response.model_name or None,
        )

    async def record_response(self, number: int, response: ModelResponse) -> None:
        """Log the response and its tool intents, unless a previous attempt (or the
        runtime, with the record) did."""
        if number < self.logged.responses:
            return
        ctx = self._owner()
        ctx.check_lease()
        entry = self._response_entry(response)
        await ctx.store.record_response(
            ctx.lease, entry.response_json, entry.intents, durable=False
        )
        self.logged.responses = number + 1

    async def record_return(self, part: ToolReturnPart) -> None:
        """Log a tool's result, unless a previous attempt (or the runtime, with the
        record) did; append it to the run's stream (a replay's is there already)."""
        if self.stream is not None:
            body = {
                "request": self.request,
                "tool_call_id": part.tool_call_id,
                "tool_name": part.tool_name,
                "content": part.content,
                "is_error": part.is_error,
            }
            await self.stream.put(TOOL_RESULT, body, f"tool_result:{part.tool_call_id}")
        if part.tool_call_id in self.logged.results:
            return
        await self._owner().record_tool_result(
            part.tool_call_id, part.content, is_error=part.is_error, durable=False
        )
        self.logged.results.add(part.tool_call_id)

    async def _execute(
        self, step: str, sequence: int, kind: OperationKind, document: Document
    ) -> str:
        """Execute one operation; its output document, or the persisted outcome raised."""
        record, _ = await self._outcome(step, sequence, kind, document)
        return success(record)

    async def _outcome(
        self,
        step: str,
        sequence: int,
        kind: OperationKind,
        document: Document,
        *,
        log: Callable[[Record], Sequence[LogEntry]] | None = None,
        handler_id: str | None = None,
        ahead: Callable[[Record], Sequence[Invocation]] | None = None,
    ) -> tuple[Record, bool]:
        """Execute one operation; its record, and whether the runtime stored ``log(record)``
        with it (a LocalRuntime on the store holding this run, when the record is new).
        ``handler_id`` overrides the binding's handler for ``kind`` (a routed MCP tool)."""
        invocation = self._invocation(step, sequence, kind, document, handler_id=handler_id)
        return await self._run(invocation, log, ahead)

    def _invocation(
        self,
        step: str,
        sequence: int,
        kind: OperationKind,
        document: Document,
        *,
        handler_id: str | None = None,
    ) -> Invocation:
        """The invocation of ``document`` as operation ``step`` #sequence."""
        handler_id = handler_id or self.binding.handlers.for_kind(kind)
        if handler_id is None:
            raise MissingDurableHandler(
                f"no {kind.value} handler is configured in Handlers", run_id=self.binding.run_id
            )
        return Invocation(
            run_id=self.binding.run_id,
            step_id=self.binding.step_id(step),
            sequence=sequence,
            kind=kind,
            handler_id=handler_id,
            input_json=document.to_json(),
        )

    def _tool_invocation(
        self,
        number: int,
        planned: PlannedCall,
        *,
        attempt: int = 0,
        approval: ApprovalDecision | None = None,
    ) -> Invocation:
        """The ``tool.call`` invocation of an application tool's call."""
        run_id = self.binding.run_id
        sequence = attempt_sequence(
            tool_sequence(number, planned.position, run_id=run_id), attempt, run_id=run_id
        )
        document = ToolRequest(
            call=planned.call,
            arguments=planned.arguments,
            context=RunContext(run_id=run_id, step=number, agent_name=self.agent.name),
            retry=planned.retry,
            approval=approval,
        )
        return self._invocation(TOOL_CALL, sequence, OperationKind.TOOL_CALL, document)

    async def _run(
        self,
        invocation: Invocation,
        log: Callable[[Record], Sequence[LogEntry]] | None = None,
        ahead: Callable[[Record], Sequence[Invocation]] | None = None,
    ) -> tuple[Record, bool]:
        """Execute ``invocation`` on the binding's runtime (see :meth:`_outcome`); an
        identity recorded with other input is InputDrift in the conversation's terms."""
        try:
            return await self._on_runtime(invocation, log, ahead)
        except InputDrift as error:
            raise await self._drift(invocation) from error

    async def _drift(self, invocation: Invocation) -> InputDrift:
        """InputDrift naming the operation as the conversation knows it and what differs."""
        recorded: str | None = None
        key = OperationKey(invocation.run_id, invocation.step_id, invocation.sequence)
        with contextlib.suppress(Exception):  # explaining must not hide the drift
            row = await self.binding.run_store().get_operation(key)
            if row is not None and row.record is not None:
                recorded = decode_record(row.record).invocation.input_json
        what = describe_operation(invocation)
        reason = drift_reason(OperationKind(invocation.kind), recorded, invocation.input_json)
        return InputDrift(
            f"{what} was recorded with other input than this run now sends: {reason}. A run "
            "replays what it recorded, so its prompt, instructions and tools must stay as "
            "they were: continue it with them, or start a new run id",
            run_id=invocation.run_id,
        )

    async def _on_runtime(
        self,
        invocation: Invocation,
        log: Callable[[Record], Sequence[LogEntry]] | None = None,
        ahead: Callable[[Record], Sequence[Invocation]] | None = None,
    ) -> tuple[Record, bool]:
        runtime = self.binding.runtime
        ctx = self.ctx
        if ctx is not None and isinstance(runtime, LocalRuntime) and runtime.store is ctx.store:
            # This runtime sees the run's lease: it checks the identity against the log.
            if log is not None:
                return await runtime.execute_and_log(invocation, log, ahead=ahead)
            return await runtime.execute(invocation), False
        if ctx is None or ctx.replay.settled:
            return await runtime.execute(invocation), False
        # Another runtime: the identity is checked here against the run's recorded work.
        async with ctx.replay.request(operation_item(invocation.step_id, invocation.sequence)):
            return await runtime.execute(invocation), False


@dataclass(frozen=True, slots=True)
class _Restarts:
    """The turns a replaying loop may skip: all before ``last`` (the last model request with
    a record) but those it replays, ``replayed``; the usage of each response, each recorded
    operation with its turn, and by tool the turns of its rejected calls and of its calls
    that ran."""

    prompt: str
    turns: list[tuple[Item, int]]
    usages: list[Usage]
    last: int
    replayed: frozenset[int]
    rejected: dict[str, list[int]]
    accepted: dict[str, list[int]]

    def failures_at(self, number: int) -> dict[str, int]:
        """Each tool's failure count as model request ``number`` is built: its calls
        rejected since the last turn in which one of its calls ran (that turn's included)."""
        failures: dict[str, int] = {}
        for name, turns in self.rejected.items():
            ran = max((turn for turn in self.accepted.get(name, ()) if turn < number), default=-1)
            count = sum(1 for turn in turns if ran < turn < number)
            if count:
                failures[name] = count
        return failures


def _plan_restarts(
    events: Sequence[Event], limit: int, ran: set[int], *, exact: bool
) -> tuple[list[Usage], int, frozenset[int], dict[str, list[int]], dict[str, list[int]]] | None:
    """From the log: the usage of each response before model request ``limit``; the last
    turn the loop may restart at; the turns before it that must replay; and by tool the
    turns of its rejected calls (error results of calls that have no record, ``ran`` being
    the tool sequences with one, and never paused) and of its calls that ran.

    The turns that paused replay. With ``exact`` False (tools run in this process may give
    error results without a record), so do the turns that hold a failure count: each run of
    rejected calls of a tool until a later call of it runs, and the last turn moves back
    before any such run. None when a response or result is not in the form the loop logs,
    or when ``exact`` meets a result that only a tool run in this process gives."""
    usages: list[Usage] = []
    where: dict[str, tuple[int, str]] = {}  # call id -> its tool sequence, its tool
    rejected: dict[str, list[int]] = {}
    accepted: dict[str, list[int]] = {}
    paused_calls: set[str] = set()
    pauses: set[int] = set()

    for event in events:
        payload = event.payload
        if event.type not in ("llm_call", "tool_result", PAUSED_EVENT):
            continue
        if not isinstance(payload, dict):
            return None
        if event.type == "llm_call":
            if len(usages) >= limit:
                break  # model request ``limit``'s response: its turn replays
            usage, calls = payload.get("usage"), payload.get("tool_calls")
            if not isinstance(usage, dict) or not isinstance(calls, list):
                return None
            try:
                usages.append(Usage.from_dict(usage))
            except InvalidDocument:
                return None
            turn = len(usages) - 1
            for position, call in enumerate(calls):
                if not isinstance(call, dict):
                    return None
                sequence, name = turn * MAX_CALLS_PER_RESPONSE + position, str(call.get("name"))
                where[str(call.get("id"))] = (sequence, name)
                if sequence in ran:
                    accepted.setdefault(name, []).append(turn)
        elif event.type == "tool_result":
            call_id, error = str(payload.get("id")), payload.get("is_error")
            if not isinstance(error, bool):
                return None
            found = where.get(call_id)
            if found is None or found[0] in ran or call_id in paused_calls:
                continue
            if not error:
                if exact:
                    return None  # a tool run in this process gave it
                continue
            rejected.setdefault(found[1], []).append(found[0] // MAX_CALLS_PER_RESPONSE)
        elif event.type == PAUSED_EVENT:
            paused, calls = payload.get("request_number"), payload.get("calls")
            if not isinstance(paused, int) or paused < 0 or not isinstance(calls, list):
                return None
            pauses.add(paused)
            for call in calls:  # a paused call was not rejected: its turn ends its tool's count
                if not isinstance(call, dict) or str(call.get("call_id")) in paused_calls:
                    continue
                paused_calls.add(str(call.get("call_id")))
                accepted.setdefault(str(call.get("tool")), []).append(paused)
    last = len(usages)
    replayed = {turn for turn in pauses if turn < last}
    if not exact:
        spans: list[tuple[int, int]] = []  # (first, last) turn of each failure count held
        for name, turns in rejected.items():
            runs = sorted(accepted.get(name, ()))
            for turn in turns:
                end = next((ran_at for ran_at in runs if ran_at >= turn), limit)
                spans.append((turn, end))
        moved = True
        while moved:  # back to a turn that no failure count spans as it begins
            moved = False
            for first, end in spans:
                if first < last <= end:
                    last, moved = first, True
        replayed = {turn for turn in pauses if turn < last}
        for first, end in spans:
            replayed.update(range(first, min(end + 1, last)))
    if last < 1:
        return None
    return usages[:last], last, frozenset(replayed), rejected, accepted


def _same_pause(logged: PausedRun | None, paused: PausedRun) -> bool:
    """Whether ``paused`` is the logged pause. Its messages are not compared: the response
    it paused at and the request before it are recorded, so a pause at the same response
    has the same conversation (and a logged one may not hold it)."""
    if logged is None:
        return False
    return dataclasses.replace(logged, messages=()) == dataclasses.replace(paused, messages=())


def _read_pause(payload: dict[str, Any], run_id: str) -> tuple[PausedRun, OperationKey | None]:
    """A logged pause, and the model request holding its conversation when the event
    does not (one written by an earlier version holds it); InvalidDocument otherwise."""
    if "messages" in payload:
        return PausedRun.from_dict(payload), None
    source = payload.get("conversation")
    if not isinstance(source, dict):
        raise InvalidDocument(
            "an agent_paused event holds neither its conversation nor the model request "
            "that does; the run's log was changed outside zincir",
            run_id=run_id,
        )
    try:
        key = OperationKey(run_id, str(source["step_id"]), int(source["sequence"]))
    except (KeyError, TypeError, ValueError):
        raise InvalidDocument(
            f"an agent_paused event names no model request ({source!r}); the run's log "
            "was changed outside zincir",
            run_id=run_id,
        ) from None
    return PausedRun.from_dict({**payload, "messages": []}), key


async def _paused_messages(store: Store, key: OperationKey) -> tuple[Message, ...]:
    """The conversation up to the response of model request ``key``: its stored input's
    messages, then that response (the record read whole, its digest checked)."""
    row = await store.get_operation(key)
    where = f"{key.step_id} #{key.sequence}"
    if row is None or row.status != "completed" or row.record is None:
        raise RecordFormatError(
            f"the pause's conversation is in the record of {where}, which the store does "
            "not hold completed; the run's records were changed outside zincir",
            run_id=key.run_id,
        )
    record = decode_record(row.record)
    if not isinstance(record.outcome, Success):
        raise RecordFormatError(
            f"the pause's conversation is in the record of {where}, which holds no "
            "response; the run's records were changed outside zincir",
            run_id=key.run_id,
        )
    request = _read(ModelRequest, record.invocation.input_json, where, "model", key.run_id)
    response = _read(ModelResponse, record.outcome.output_json, where, "model", key.run_id)
    return (*request.messages, Message(role="assistant", parts=tuple(response.parts)))


def _read(document: type[D], output: str, where: str, handler: str, run_id: str) -> D:
    """The output document of a record; InvalidDocument naming the record otherwise."""
    try:
        return document.from_json(output)
    except InvalidDocument as error:
        raise InvalidDocument(
            f"the record of {where} holds no valid {document.__name__} ({error.detail}); "
            f"the {handler} handler must return one",
            run_id=run_id,
        ) from None


def _deferral(record: Record) -> Deferred | None:
    """A tool.call suspended for an approval or an external result, as a Deferred."""
    outcome: Outcome = record.outcome
    if not isinstance(outcome, Suspended):
        return None
    if outcome.reason == SuspendReason.APPROVAL:
        return Deferred("approval")
    if outcome.reason == SuspendReason.EXTERNAL_TOOL:
        return Deferred("external")
    return None


def success(record: Record) -> str:
    """The output document of a success; the failure or suspension raised."""
    outcome = record.outcome
    if isinstance(outcome, Success):
        return outcome.output_json
    if isinstance(outcome, Failure):
        raise DurableOperationFailed(record)
    raise Suspend(
        str(outcome.reason),
        loads_strict(outcome.state_json),
        state_version=outcome.state_version,
    )
