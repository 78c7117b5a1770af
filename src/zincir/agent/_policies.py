"""Tool policies: deterministic, in-process rules that shape a tool's calls.

A ``ToolPolicy`` may rewrite a call's arguments (before the call's identity is formed, so
the stored invocation and any approval hold the rewritten arguments), refuse a call (the
tool is not called; the model reads the reason as the call's result) and rewrite a tool's
result (before it is logged and sent to the model). The loop runs them again on every
replay, so they must be pure: the same call gives the same answer, with no I/O, clock or
randomness.

Order: an agent's ``tool_policies`` wrap each tool's own ``policies``. Arguments and
refusals go through the agent's policies first, then the tool's; a result goes through the
tool's first, then the agent's, so the agent's have the first look at what the model sent
and the last word on what it reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidInput
from .._json import json_form
from ..contract.payloads import ToolCallPart
from ._errors import ToolPolicyFailed

if TYPE_CHECKING:
    from ._tools import Tool

__all__ = ["Policies", "ToolPolicy", "check_policies", "result_digest"]

ArgumentsHook = Callable[[ToolCallPart], Mapping[str, Any]]
RefuseHook = Callable[[ToolCallPart], str | None]
ReturnsHook = Callable[[ToolCallPart, Any], Any]


class ToolPolicy:
    """Rules for a tool's calls: pass functions, or subclass and override any of the three.

    ``arguments(call)`` returns the arguments the call runs with; ``refuse(call)`` returns
    a reason to refuse it (None lets it run); ``returns(call, result)`` returns what the
    model reads of a successful result. All three are synchronous and must be pure.
    """

    def __init__(
        self,
        *,
        arguments: ArgumentsHook | None = None,
        refuse: RefuseHook | None = None,
        returns: ReturnsHook | None = None,
        name: str | None = None,
    ) -> None:
        for hook, what in ((arguments, "arguments"), (refuse, "refuse"), (returns, "returns")):
            if hook is not None and not callable(hook):
                raise InvalidInput(f"ToolPolicy({what}=...) must be callable or None")
        self._arguments, self._refuse, self._returns = arguments, refuse, returns
        self.name = name if name is not None else type(self).__name__

    def __repr__(self) -> str:
        return f"ToolPolicy({self.name!r})"

    def arguments(self, call: ToolCallPart) -> Mapping[str, Any]:
        """The arguments the call runs with (``call.arguments``: the validated ones)."""
        return call.arguments if self._arguments is None else self._arguments(call)

    def refuse(self, call: ToolCallPart) -> str | None:
        """Why the call must not run (the model reads it as the result), or None."""
        return None if self._refuse is None else self._refuse(call)

    def returns(self, call: ToolCallPart, result: Any) -> Any:
        """What the model reads of the call's successful ``result`` (its JSON data)."""
        return result if self._returns is None else self._returns(call, result)


def check_policies(policies: Iterable[ToolPolicy], what: str) -> tuple[ToolPolicy, ...]:
    """``policies`` as a tuple; InvalidInput naming ``what`` for anything else."""
    if isinstance(policies, ToolPolicy):
        raise InvalidInput(f"{what} takes a list of ToolPolicy objects, not a single one")
    checked = tuple(policies)
    for policy in checked:
        if not isinstance(policy, ToolPolicy):
            raise InvalidInput(f"{what} must hold zincir.ToolPolicy objects, not {policy!r}")
    return checked


@dataclass(frozen=True, slots=True)
class Policies:
    """The policies over one tool's calls, outermost (the agent's) first."""

    tool: Tool
    chain: Sequence[ToolPolicy]
    run_id: str | None

    @classmethod
    def of(cls, agent_policies: Sequence[ToolPolicy], tool: Tool, run_id: str | None) -> Policies:
        return cls(tool, (*agent_policies, *tool.policies), run_id)

    def arguments(self, call: ToolCallPart, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments after every policy, checked against the tool's schema."""
        for policy in self.chain:
            current = _with(call, arguments)
            changed = self._hook(policy, "arguments", policy.arguments, current)
            if not isinstance(changed, Mapping):
                raise self._failed(
                    policy, f"its arguments hook returned {type(changed).__name__}, not a mapping"
                )
            arguments = self._validated(policy, changed)
        return arguments

    def refusal(self, call: ToolCallPart, arguments: dict[str, Any]) -> str | None:
        """The first policy's reason to refuse the call with ``arguments``, or None."""
        current = _with(call, arguments)
        for policy in self.chain:
            reason = self._hook(policy, "refuse", policy.refuse, current)
            if reason is None:
                continue
            if not isinstance(reason, str):
                raise self._failed(
                    policy, f"its refuse hook returned {type(reason).__name__}, not a str or None"
                )
            return reason or f"The call to {self.tool.name!r} was refused by a tool policy."
        return None

    def returns(self, call: ToolCallPart, arguments: dict[str, Any], result: Any) -> Any:
        """A successful result after every policy, innermost (the tool's) first."""
        current = _with(call, arguments)
        for policy in reversed(self.chain):
            changed = self._hook(policy, "returns", policy.returns, current, result, ran=True)
            try:
                result = json_form(changed, what=f"what tool policy {policy.name!r} returned")
            except InvalidInput as error:
                raise self._failed(policy, error.detail, ran=True) from None
        return result

    def _validated(self, policy: ToolPolicy, arguments: Mapping[str, Any]) -> dict[str, Any]:
        from ._tools import ToolArgumentsRejected

        try:
            return self.tool.validate(arguments)
        except ToolArgumentsRejected as error:
            raise self._failed(
                policy, f"the arguments it returned fail the tool's schema ({error.message})"
            ) from None

    def _hook(
        self, policy: ToolPolicy, hook: str, run: Callable[..., Any], *args: Any, ran: bool = False
    ) -> Any:
        try:
            return run(*args)
        except Exception as error:
            problem = f"its {hook} hook raised {type(error).__name__}: {error}"
            raise self._failed(policy, problem, ran=ran) from error

    def _failed(self, policy: ToolPolicy, problem: str, *, ran: bool = False) -> ToolPolicyFailed:
        what = (
            "the tool ran and its result is kept (it is not called again)"
            if ran
            else "the call did not run"
        )
        return ToolPolicyFailed(
            f"tool policy {policy.name!r} of tool {self.tool.name!r} failed: {problem}; "
            f"{what}, the model was not told and the run stopped. Fix the policy (it must be "
            "pure: the same call, the same answer) and resume the run",
            run_id=self.run_id,
            tool=self.tool.name,
            policy=policy.name,
        )


def result_digest(content: Any, is_error: bool) -> str:
    """SHA-256 hex of a tool result as the model reads it (canonical JSON)."""
    text = json.dumps(
        {"content": content, "is_error": is_error},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _with(call: ToolCallPart, arguments: dict[str, Any]) -> ToolCallPart:
    """``call`` as it now stands: the validated (or rewritten) ``arguments``."""
    return ToolCallPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, arguments=dict(arguments)
    )
