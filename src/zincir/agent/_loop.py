"""The loop both paths share: model → tool calls → model … → final text.

An ``Executor`` decides how a model request or a tool call happens (directly, or as a
durable operation) and what is logged; the loop itself holds only deterministic state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._crash import crash_point
from .._errors import ApprovalMismatch, InputDrift, InvalidInput, OperationFailed
from ..contract import Failure
from ..contract.payloads import (
    ApprovalDecision,
    Message,
    ModelRequest,
    ModelResponse,
    RetryDelay,
    RunContext,
    TextPart,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
    Usage,
)
from ..store import grouped_writes
from ._approval import Execution, PausedCall, PausedRun, args_sha256
from ._capabilities import loaded_capabilities
from ._conversation import Conversation, add_usage, response_text, tool_calls
from ._errors import DurableOperationFailed, ToolPolicyFailed, ToolRetriesExhausted
from ._identity import tool_retry_attempt, tool_sequence
from ._policies import Policies, ToolPolicy, result_digest
from ._preflight import ResolvedToolsets
from ._result import AgentRunResult
from ._retry import retry_document
from ._stream import Emit
from ._tools import (
    RETRY_TOOL,
    TOOL_FAILED,
    Tool,
    ToolArgumentsRejected,
    ToolErrors,
    ToolOrigin,
    arguments_problem,
    call_tool,
)

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Deferred", "Executor", "PlannedCall", "Proposal", "Refused", "Restart", "run_loop"]

T = TypeVar("T")


class Executor(Protocol):
    """How side effects happen and what is recorded on one path."""

    run_id: str | None
    emit: Emit | None

    async def restart_at(self, number: int) -> Restart | None: ...
    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None: ...
    async def before_tools(self, number: int) -> None: ...
    async def model_request(
        self,
        number: int,
        request: ModelRequest,
        *,
        attempt: int = 0,
        ahead: Callable[[ModelResponse], Sequence[PlannedCall]] | None = None,
    ) -> ModelResponse: ...
    async def release_ahead(self) -> None: ...
    async def wait_retry(self, number: int, delay: RetryDelay) -> None: ...
    async def wait_tool_retry(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        delay: RetryDelay,
        *,
        approval: ApprovalDecision | None = None,
        attempt: int = 0,
    ) -> None: ...
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
    ) -> ToolOutput | Deferred: ...
    async def decide(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        arguments: dict[str, Any],
        execution: Execution,
        proposed: ApprovalDecision,
    ) -> ApprovalDecision | Refused: ...
    async def bind_approval(
        self,
        call: ToolCallPart,
        proposed: ApprovalDecision,
        digest: str,
        *,
        model_digest: str | None = None,
    ) -> Refused | None: ...
    def set_aside(self, call: ToolCallPart, bound: str, digest: str, problem: str) -> Refused: ...
    def shown(self, call_id: str) -> str | None: ...
    def shows_edit(self, call_id: str) -> bool: ...
    async def record_response(self, number: int, response: ModelResponse) -> None: ...
    async def record_return(self, part: ToolReturnPart) -> None: ...
    async def record_pause(self, paused: PausedRun) -> None: ...


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A call of a response that will run as planned: its tool, validated arguments and
    retry number, fixed before anything runs."""

    position: int
    tool: Tool
    call: ToolCallPart
    arguments: dict[str, Any]
    retry: int


@dataclass(frozen=True, slots=True)
class Restart:
    """The loop's state as model request ``number`` is built: the conversation up to it,
    the usage of the responses before it and each tool's failure count (its calls rejected
    in a row), where a replaying loop goes on instead of replaying the turns between."""

    number: int
    messages: tuple[Message, ...]
    usage: Usage
    failures: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Deferred:
    """A tool asked to pause its call: for an approval, or for an external result."""

    execution: Execution


@dataclass(frozen=True, slots=True)
class Refused:
    """A decision on record binds other arguments (``bound``) than the call would now run
    with (``digest``), or (``problem``) its edited arguments fail the tool's schema: the
    call does not run and is asked again."""

    bound: str
    digest: str
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A call refused by its decision's digest, paused again on its current arguments."""

    call: PausedCall
    refused: Refused


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposed decision for a paused call and the argument digest it was made for."""

    decision: ApprovalDecision
    args_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class _Planned:
    """One tool call with its identity fixed: a tool and arguments (after its policies), a
    retry prompt (``rejection``) or a policy's ``refusal``."""

    position: int
    call: ToolCallPart
    tool: Tool | None
    arguments: dict[str, Any]
    retry: int
    rejection: str | None
    refusal: str | None = None
    policies: Policies | None = None


_Done = tuple[ToolReturnPart, Sequence[Message]]


async def run_loop(
    agent: Agent,
    prompt: str,
    executor: Executor,
    *,
    decisions: Mapping[str, Proposal] | None = None,
    paused: PausedRun | None = None,
) -> AgentRunResult:
    """Run the conversation to its final text, or to a pause for decisions.

    ``paused`` continues a direct run from where it paused (the durable path replays
    instead, skipping the turns its executor restarts past); ``decisions`` are applied to
    the paused calls they name.
    """
    try:
        return await _conversation(agent, prompt, executor, decisions or {}, paused)
    finally:  # a call claimed with its response runs unless the loop stops before it
        await executor.release_ahead()


async def _conversation(
    agent: Agent,
    prompt: str,
    executor: Executor,
    decisions: Mapping[str, Proposal],
    paused: PausedRun | None,
) -> AgentRunResult:
    """:func:`run_loop`'s turns."""
    conversation = Conversation(agent.instructions, prompt)
    usage = Usage()
    failures: dict[str, int] = {}
    number = 0
    response: ModelResponse | None = None
    known: dict[str, ToolReturnPart] = {}
    deferred: dict[str, Execution] = {}
    if paused is not None:
        conversation.messages = list(paused.messages)
        usage, number = paused.usage, paused.request_number
        last = paused.messages[-1] if paused.messages else None
        if last is None or last.role != "assistant":
            raise InvalidInput("the paused run does not end with the model's response")
        response = ModelResponse(
            parts=[p for p in last.parts if isinstance(p, TextPart | ToolCallPart)]
        )
        known = {part.tool_call_id: part for part in paused.completed}
        deferred = {c.call_id: c.execution for c in paused.calls}
    while True:
        if response is None and (restart := await executor.restart_at(number)) is not None:
            conversation.messages = list(restart.messages)
            usage, number = restart.usage, restart.number
            failures = dict(restart.failures)
        context = RunContext(
            run_id=executor.run_id or agent.name, step=number, agent_name=agent.name
        )
        loaded = loaded_capabilities(conversation.messages, agent.capabilities)
        resolved = await agent.resolve_toolsets(context, loaded)
        tools = agent.tools_by_name(resolved, run_id=executor.run_id)
        if response is None:
            await executor.prepare(number, resolved)
            request = conversation.request(
                agent.model.name, [t.definition() for t in tools.values()]
            )
            for hook in agent.hooks:
                await hook.on_model_request(number, request)
            response = await _ask(
                agent,
                executor,
                number,
                request,
                None
                if paused or decisions
                else _runs_as_planned(tools, failures, executor, agent.tool_policies),
                policed=bool(agent.tool_policies) or any(t.policies for t in tools.values()),
            )
            for hook in agent.hooks:
                await hook.on_model_response(number, response)
            usage = add_usage(usage, response.usage)
            conversation.add_response(response)
            await executor.record_response(number, response)
            crash_point("agent.response_logged")
        calls = tool_calls(response)
        if not calls:
            return AgentRunResult(response_text(response), tuple(conversation.messages), usage)
        plans = [
            _plan(position, call, tools, failures, executor.run_id, agent.tool_policies)
            for position, call in enumerate(calls)
        ]
        exhausted = sorted(
            {
                p.call.tool_name
                for p in plans
                if p.rejection and failures[p.call.tool_name] > agent.tool_retries
            }
        )
        if exhausted:
            for plan in plans:
                if plan.rejection is not None:
                    await executor.record_return(_rejected(plan.call, plan.rejection))
            raise ToolRetriesExhausted(
                f"the model called {', '.join(map(repr, exhausted))} wrongly more than "
                f"{agent.tool_retries} times in a row (unknown tool, arguments that are not JSON, "
                "or arguments that fail its schema); "
                "check the tool's schema and the instructions, or raise Agent(tool_retries=...)",
                run_id=executor.run_id,
            )
        await executor.before_tools(number)
        edits: dict[str, ToolCallPart] = {}  # the calls approved with edited arguments
        work = [
            _execute(agent, executor, number, p, decisions, known, deferred, edits) for p in plans
        ]
        if len(work) > 1:
            work = [_grouped(one) for one in work]
        done = await asyncio.gather(*work)
        finished = [item for item in done if isinstance(item, tuple)]
        refusals = [item for item in done if isinstance(item, _Refusal)]
        waiting = [
            item.call if isinstance(item, _Refusal) else item
            for item in done
            if isinstance(item, PausedCall | _Refusal)
        ]
        if waiting:
            paused = PausedRun(
                run_id=executor.run_id,
                prompt=prompt,
                request_number=number,
                calls=tuple(waiting),
                messages=tuple(conversation.messages),
                usage=usage,
                completed=tuple(part for part, _ in finished),
            )
            await executor.record_pause(paused)
            if refusals:
                raise _mismatch(refusals, executor.run_id)
            return AgentRunResult("", tuple(conversation.messages), usage, paused=paused)
        crash_point("agent.tools_done")
        for plan in plans:
            if plan.rejection is None:
                failures.pop(plan.call.tool_name, None)
        if edits:  # the model's next request shows each call with the arguments that ran
            conversation.messages[-1] = _edited(conversation.messages[-1], edits)
        conversation.add_tool_returns(part for part, _ in finished)
        for _, follow_up in finished:
            conversation.add_messages(follow_up)
        number += 1
        response = None


def _runs_as_planned(
    tools: dict[str, Tool],
    failures: Mapping[str, int],
    executor: Executor,
    policies: Sequence[ToolPolicy] = (),
) -> Callable[[ModelResponse], list[PlannedCall]]:
    """What the loop will run from a new response, planned as the loop plans it (on a copy
    of the failure counts): each valid, unrefused call of a tool that needs no approval (a
    response whose tool policy fails is planned by the loop itself, which raises)."""

    def planned(response: ModelResponse) -> list[PlannedCall]:
        counts = dict(failures)
        try:
            plans = [
                _plan(position, call, tools, counts, executor.run_id, policies)
                for position, call in enumerate(tool_calls(response))
            ]
        except ToolPolicyFailed:
            return []
        return [
            PlannedCall(plan.position, plan.tool, plan.call, plan.arguments, plan.retry)
            for plan in plans
            if plan.rejection is None
            and plan.refusal is None
            and plan.tool is not None
            and not plan.tool.requires_approval
        ]

    return planned


async def _grouped(work: Awaitable[T]) -> T:
    """``work`` as one of concurrent tool calls: the records they store in the same pass
    of the event loop share a commit."""
    with grouped_writes():
        return await work


async def _ask(
    agent: Agent,
    executor: Executor,
    number: int,
    request: ModelRequest,
    ahead: Callable[[ModelResponse], Sequence[PlannedCall]] | None = None,
    *,
    policed: bool = False,
) -> ModelResponse:
    """Model request ``number``; a retryable failure waits its delay and tries again, until
    the agent's ``retry`` policy is exhausted (attempts, or delays waited), then is raised.
    ``policed``: tools have policies, which the drift error names as a possible cause."""
    cumulative = 0.0
    attempt = 0
    while True:
        try:
            return await executor.model_request(number, request, attempt=attempt, ahead=ahead)
        except InputDrift as error:
            if not policed:
                raise
            raise InputDrift(
                f"{error.detail}. The tools have tool policies: a policy that rewrites results "
                "must rewrite a replayed result as it did when the model first read it (it "
                "must be pure); keep the policies as they were for this run",
                run_id=error.run_id,
            ) from error
        except OperationFailed as error:
            if not error.retryable or agent.retry.exhausted(
                attempt + 1, timedelta(seconds=cumulative)
            ):
                raise
            attempt += 1
            delay = retry_document(
                agent.retry,
                run_id=executor.run_id or agent.name,
                retry=attempt,
                failed_request=number,
                error=error,
                cumulative_before=cumulative,
            )
            cumulative = delay.cumulative_delay_seconds
            await executor.wait_retry(number, delay)


def _plan(
    position: int,
    call: ToolCallPart,
    tools: dict[str, Tool],
    failures: dict[str, int],
    run_id: str | None,
    agent_policies: Sequence[ToolPolicy] = (),
) -> _Planned:
    """Validate one call before anything runs, then apply its tool policies (arguments,
    then refusals); a bad call counts as a failure of its name, a refused one does not."""
    name = call.tool_name
    tool = tools.get(name)
    rejection: str | None = None
    arguments: dict[str, Any] = {}
    if tool is None:
        known = ", ".join(sorted(tools)) or "(none)"
        rejection = f"unknown tool {name!r}; the available tools are: {known}. Call one of them."
    elif call.malformed_arguments is not None:
        problem = arguments_problem(call.malformed_arguments) or "not a JSON object"
        rejection = (
            f"the arguments of your call to {name!r} were {problem}; send a JSON object "
            "matching the tool's schema and call again."
        )
    else:
        try:
            arguments = tool.validate(call.arguments)
        except ToolArgumentsRejected as error:
            rejection = error.message
    if rejection is not None:
        failures[name] = failures.get(name, 0) + 1
    refusal: str | None = None
    policies: Policies | None = None
    if tool is not None and rejection is None and (agent_policies or tool.policies):
        policies = Policies.of(agent_policies, tool, run_id)
        arguments = policies.arguments(call, arguments)
        refusal = policies.refusal(call, arguments)
    return _Planned(
        position, call, tool, arguments, failures.get(name, 0), rejection, refusal, policies
    )


def _rejected(call: ToolCallPart, message: str) -> ToolReturnPart:
    return ToolReturnPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, content=message, is_error=True
    )


async def _execute(
    agent: Agent,
    executor: Executor,
    number: int,
    plan: _Planned,
    decisions: Mapping[str, Proposal],
    known: Mapping[str, ToolReturnPart],
    deferred: Mapping[str, Execution],
    edits: dict[str, ToolCallPart],
) -> _Done | PausedCall | _Refusal:
    """Run one planned call; a workflow-origin tool runs here, in the agent process."""
    call = plan.call
    follow_up: Sequence[Message] = ()
    if call.tool_call_id in known:
        part = known[call.tool_call_id]
    elif plan.rejection is not None or plan.tool is None:
        part = _rejected(call, plan.rejection or "")
    elif plan.refusal is not None:  # a tool policy's: told to the model as a denial is
        part = _returned_part(call, plan.refusal, is_error=True)
    elif plan.tool.origin is ToolOrigin.WORKFLOW:
        errors = plan.tool.tool_errors or agent.tool_errors
        try:
            content, is_error = await call_tool(plan.tool, plan.arguments, errors)
        except OperationFailed as error:
            if not (error.retryable or error.error == RETRY_TOOL):
                raise
            # an in-process tool has no durable timer: its retry request ends its attempts
            content, is_error = _exhausted(plan.tool, error, errors, executor.run_id), True
        if plan.policies is not None and not is_error:
            content = plan.policies.returns(call, plan.arguments, content)
        part = _returned_part(call, content, is_error=is_error)
    else:
        outcome = await _decided(agent, executor, number, plan, decisions, deferred, edits)
        if isinstance(outcome, PausedCall | _Refusal):
            return outcome
        part, follow_up = outcome
    if plan.policies is not None:
        _check_shown(executor, plan.policies, part)
    for hook in agent.hooks:
        await hook.on_tool_return(part)
    await executor.record_return(part)
    if executor.emit is not None:
        await executor.emit(part)
    return part, follow_up


async def _decided(
    agent: Agent,
    executor: Executor,
    number: int,
    plan: _Planned,
    decisions: Mapping[str, Proposal],
    deferred: Mapping[str, Execution],
    edits: dict[str, ToolCallPart],
) -> _Done | PausedCall | _Refusal:
    """Run the call, pausing it (or applying its decision) when it needs one.

    A decision binds the digest of the arguments it lets run; one made (or bound) for other
    arguments is refused: the call is paused again on its current arguments, for a new
    decision, and so is one whose edited arguments fail the tool's schema (a decision
    recorded with ``decide``; the agent checks its own before anything is stored). An
    approval with edited arguments adds the call as it ran to ``edits``. ``deferred`` names
    the calls a direct run paused on, so their tools are not asked again.
    """
    tool, call, arguments = plan.tool, plan.call, plan.arguments
    assert tool is not None
    run_id = executor.run_id
    attempt = 0
    execution: Execution | None = "approval" if tool.requires_approval else None
    if execution is None and call.tool_call_id in deferred:
        execution, attempt = deferred[call.tool_call_id], 1
    if execution is None:
        output = await _run_tool(agent, executor, number, plan, arguments)
        if not isinstance(output, Deferred):
            return _returned(call, output)
        execution, attempt = output.execution, 1
    digest = args_sha256(arguments)
    waiting = PausedCall(
        call_id=call.tool_call_id,
        tool=tool.name,
        arguments=arguments,
        sequence=tool_sequence(number, plan.position, run_id=run_id),
        args_sha256=digest,
        execution=execution,
    )
    proposal = decisions.get(call.tool_call_id)
    if proposal is None:
        return waiting
    if proposal.args_sha256 is not None and proposal.args_sha256 != digest:
        return _Refusal(waiting, Refused(proposal.args_sha256, digest))
    problem = _override_problem(tool, proposal.decision)
    if problem is not None:
        bound = args_sha256(proposal.decision.override_arguments or {})
        return _Refusal(waiting, executor.set_aside(call, bound, digest, problem))
    decision = await executor.decide(
        number, plan.position, call, arguments, execution, proposal.decision
    )
    if isinstance(decision, Refused):
        return _Refusal(waiting, decision)
    chosen = arguments
    edited = decision.decision == "approve" and decision.override_arguments is not None
    if edited:
        chosen = _check_override(tool, decision, run_id)
    refused = await executor.bind_approval(
        call, proposal.decision, args_sha256(chosen), model_digest=digest if edited else None
    )
    if refused is not None:
        return _Refusal(waiting, refused)
    if edited and executor.shows_edit(call.tool_call_id):
        edits[call.tool_call_id] = ToolCallPart(
            tool_call_id=call.tool_call_id, tool_name=call.tool_name, arguments=chosen
        )
    if decision.decision == "deny":
        content = decision.reason or "The tool call was denied."
        return _returned_part(call, content, is_error=True), ()
    if decision.decision == "external_result":
        return _returned_part(call, decision.result), ()
    output = await _run_tool(
        agent, executor, number, plan, chosen, approval=decision, attempt=attempt
    )
    if isinstance(output, Deferred):
        raise InvalidInput(
            f"tool {tool.name!r} asked to pause call {call.tool_call_id!r} again after it "
            "was approved; a tool that raises ApprovalRequired or CallDeferred must check "
            "zincir.agent.current_approval() first",
            run_id=run_id,
        )
    return _returned(call, output)


async def _run_tool(
    agent: Agent,
    executor: Executor,
    number: int,
    plan: _Planned,
    arguments: dict[str, Any],
    *,
    approval: ApprovalDecision | None = None,
    attempt: int = 0,
) -> ToolOutput | Deferred:
    """Run a planned call; a ``RetryTool`` failure (or a retryable one, after the runtime's
    own attempts) waits its durable delay and runs the call again until the agent's
    ``tool_retry`` policy is exhausted, then is reported to the model (or fails the run,
    with ``tool_errors="fail"``)."""
    tool, call = plan.tool, plan.call
    assert tool is not None
    errors = tool.tool_errors or agent.tool_errors
    policy = agent.tool_retry
    run_id = executor.run_id
    waited = 0.0
    retry = 0
    shaped = _Returns(plan.policies, call, arguments)
    while True:
        try:
            output = await executor.run_tool(
                number,
                plan.position,
                tool,
                call,
                arguments,
                plan.retry,
                approval=approval,
                attempt=tool_retry_attempt(attempt, retry),
                errors=errors,
                returns=None if plan.policies is None else shaped,
            )
            shaped.check()
            return output
        except InputDrift as error:
            if plan.policies is None or not plan.policies.chain:
                raise
            raise InputDrift(
                f"{error.detail}. Tool {tool.name!r} has tool policies: a policy that rewrites "
                "arguments must give the same arguments on every replay (it must be pure); "
                "keep the policies as they were for this run",
                run_id=error.run_id,
            ) from error
        except OperationFailed as error:
            if not (error.retryable or error.error == RETRY_TOOL):
                raise
            if policy.exhausted(retry + 1, timedelta(seconds=waited)):
                content = _exhausted(tool, error, errors, run_id)
                return ToolOutput(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.tool_name,
                    content=content,
                    is_error=True,
                )
            retry += 1
            delay = retry_document(
                policy,
                run_id=run_id or agent.name,
                retry=retry,
                failed_request=number,
                error=error,
                cumulative_before=waited,
                call=(call.tool_call_id, call.tool_name),
            )
            waited = delay.cumulative_delay_seconds
            await executor.wait_tool_retry(
                number,
                plan.position,
                call,
                delay,
                approval=approval,
                attempt=tool_retry_attempt(attempt, retry),
            )


def _check_shown(executor: Executor, policies: Policies, part: ToolReturnPart) -> None:
    """InputDrift when the run's log holds another result for this call than its policies
    now give (a policy changed between runs): the log holds what the model was shown."""
    logged = executor.shown(part.tool_call_id)
    if logged is None or logged == result_digest(part.content, part.is_error):
        return
    raise InputDrift(
        f"tool call {part.tool_call_id!r} ({part.tool_name}) was logged with another result "
        f"than tool {policies.tool.name!r} and its tool policies give it now: a policy "
        "(arguments, refuse or returns) changed since the run logged it. A run replays what "
        "it recorded and a policy must be pure; keep the policies as they were for this run, "
        "or start a new run id",
        run_id=executor.run_id,
    )


class _Returns:
    """A call's return policies as the executor applies them to the tool's output, before
    it is logged. Never raises: a failing policy gives None (nothing is logged) and
    ``check`` raises its error once the tool's record is safely stored."""

    def __init__(
        self, policies: Policies | None, call: ToolCallPart, arguments: dict[str, Any]
    ) -> None:
        self.policies, self.call, self.arguments = policies, call, arguments
        self.failed: ToolPolicyFailed | None = None

    def __call__(self, output: ToolOutput) -> ToolOutput | None:
        if self.policies is None or output.is_error:
            return output
        try:
            content = self.policies.returns(self.call, self.arguments, output.content)
        except ToolPolicyFailed as error:
            self.failed = error
            return None
        return output.model_copy(update={"content": content})

    def check(self) -> None:
        """Raise the policy failure met while shaping the output, if any."""
        if self.failed is not None:
            raise self.failed


def _exhausted(tool: Tool, error: OperationFailed, errors: ToolErrors, run_id: str | None) -> str:
    """What the model reads of a tool whose retries are spent; ``ToolFailed`` with "fail"."""
    message = error.message
    if isinstance(error, DurableOperationFailed) and isinstance(error.record.outcome, Failure):
        message = error.record.outcome.message  # the tool's words, not the run's advice
    text = f"{error.error}: {message}" if message else error.error
    if errors == "report":
        return text
    if isinstance(error, DurableOperationFailed):
        raise error  # its record ends the run: a replay fails the same way
    raise OperationFailed(
        TOOL_FAILED,
        False,
        f"tool {tool.name!r} still failed after its retries ({text}); with "
        "tool_errors='report' the model would read the error and the run would go on, or "
        "allow more attempts with Agent(tool_retry=RetryPolicy(...))",
        run_id=run_id,
    ) from error


def _mismatch(refusals: Sequence[_Refusal], run_id: str | None) -> ApprovalMismatch | InvalidInput:
    """The error for calls whose decisions bind other arguments than would run (InvalidInput
    when a decision's edited arguments fail the tool's schema)."""
    rejected = [item for item in refusals if item.refused.problem is not None]
    if rejected:
        what = "; ".join(
            f"the edited arguments approved for call {item.call.call_id!r} "
            f"({item.call.tool}) fail its schema: {(item.refused.problem or '').rstrip('.')}"
            for item in rejected
        )
        return InvalidInput(
            f"{what}; the call did not run, its decision was set aside and the run is paused "
            "until it is decided again (zincir.agent.pending_approvals and decide, or "
            "runner.resume with a decision)",
            run_id=run_id,
        )
    what = "; ".join(
        f"call {item.call.call_id!r} ({item.call.tool}) would run with arguments "
        f"{item.refused.digest} but the decision was made for {item.refused.bound}"
        for item in refusals
    )
    if run_id is None:
        how = "decide again on the arguments the paused run lists and resume it"
    else:
        how = (
            "the run is paused until it is approved again on its current arguments: "
            "agent.paused_run(durable=...) and agent.resume, or "
            "zincir.agent.pending_approvals and decide"
        )
    ran = "it did not run" if len(refusals) == 1 else "they did not run"
    return ApprovalMismatch(f"{what}; {ran}, and {how}", run_id=run_id)


def _override_problem(tool: Tool, decision: ApprovalDecision) -> str | None:
    """Why an approval's edited arguments fail the tool's schema, or None."""
    if decision.decision != "approve" or decision.override_arguments is None:
        return None
    try:
        tool.validate(decision.override_arguments)
    except ToolArgumentsRejected as error:
        return error.message
    return None


def _edited(message: Message, edits: Mapping[str, ToolCallPart]) -> Message:
    """The model's response ``message`` with each call in ``edits`` as it ran."""
    parts = tuple(
        edits.get(part.tool_call_id, part) if isinstance(part, ToolCallPart) else part
        for part in message.parts
    )
    return Message(role=message.role, parts=parts)


def _check_override(tool: Tool, decision: ApprovalDecision, run_id: str | None) -> dict[str, Any]:
    """An override's validated arguments; InvalidInput if it fails the tool's schema."""
    if decision.override_arguments is None:
        return {}
    try:
        return tool.validate(decision.override_arguments)
    except ToolArgumentsRejected as error:
        raise InvalidInput(
            f"the override arguments for tool {tool.name!r} fail its schema: {error.message}",
            run_id=run_id,
        ) from None


def _returned(call: ToolCallPart, output: ToolOutput) -> _Done:
    part = _returned_part(call, output.content, is_error=output.is_error)
    return part, tuple(output.follow_up_messages)


def _returned_part(call: ToolCallPart, content: Any, *, is_error: bool = False) -> ToolReturnPart:
    return ToolReturnPart(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        content=content,
        is_error=is_error,
    )
