"""Preflight: every handler a durable run can need is configured (and registered) first.

Checked before anything is stored or any model is called, and again before each model
request, because a dynamic toolset may offer new tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import MissingDurableHandler, MissingDurableToolsetOrigins
from ..contract import OperationKind
from ..durable import HandlerRegistry
from ._binding import DurableBinding
from ._tools import Tool, ToolOrigin, Toolset

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["ResolvedToolsets", "check_handlers", "check_route"]

ResolvedToolsets = Sequence[tuple[Toolset, Sequence[Tool]]]

_FAMILY = {
    ToolOrigin.APPLICATION: OperationKind.TOOL_CALL,
    ToolOrigin.MCP: OperationKind.MCP_REQUEST,
}


def check_route(
    agent: Agent,
    binding: DurableBinding,
    resolved: ResolvedToolsets = (),
    *,
    streaming: bool = False,
) -> None:
    """Raise unless every handler the run can need is configured and registered.

    ``resolved`` holds the tools dynamic toolsets offer for the next request; without it
    only their declared ``durable_origins`` are checked.
    """
    run_id = binding.run_id
    needs: dict[OperationKind, str] = (
        {OperationKind.MODEL_STREAM: "every streamed model request"}
        if streaming
        else {OperationKind.MODEL_REQUEST: "every model request"}
    )
    if agent.retry.max_attempts > 1:
        needs[OperationKind.RETRY_DELAY] = (
            f"the retry policy allows {agent.retry.max_attempts} attempts; "
            "Agent(retry=RetryPolicy.no_retry()) fails at once instead"
        )
    offered = dict(resolved)
    routed: dict[tuple[OperationKind, str], str] = {}
    for toolset in agent.all_toolsets:
        origins = toolset.durable_origins
        if origins is None:
            raise MissingDurableToolsetOrigins(
                f"dynamic toolset {toolset.id or '(unnamed)'} does not declare its origins; "
                "pass Toolset.dynamic(fn, durable_origins={ToolOrigin.APPLICATION, ...})",
                run_id=run_id,
            )
        tools = toolset.tools if not toolset.is_dynamic else offered.get(toolset, ())
        _check_declared(toolset, origins, tools, run_id)
        for origin in origins:
            if origin not in _FAMILY:
                continue
            own = toolset.durable_handlers.get(origin)
            if own is None:
                needs.setdefault(_FAMILY[origin], f"tools of origin {origin.value}")
            else:
                why = f"toolset {toolset.id or '(unnamed)'} routes its {origin.value} tools there"
                routed.setdefault((_FAMILY[origin], own), why)
        if agent.tool_retry.max_attempts > 1 and origins & _FAMILY.keys():
            needs.setdefault(
                OperationKind.RETRY_DELAY,
                f"the tool_retry policy allows {agent.tool_retry.max_attempts} attempts of a "
                "tool that raises RetryTool; Agent(tool_retry=RetryPolicy.no_retry()) "
                "reports its error at once instead",
            )
        if any(tool.requires_approval for tool in tools):
            needs[OperationKind.APPROVAL_RESUME] = "a tool requires approval"
    check_handlers(binding, needs, routed)


def _check_declared(
    toolset: Toolset, origins: frozenset[ToolOrigin], tools: Iterable[Tool], run_id: str
) -> None:
    for tool in tools:
        if tool.origin not in origins:
            raise MissingDurableToolsetOrigins(
                f"toolset {toolset.id or '(unnamed)'} offered tool {tool.name!r} of origin "
                f"{tool.origin.value}, which its durable_origins do not declare; add it",
                run_id=run_id,
            )


def _registered(runtime: object) -> HandlerRegistry | frozenset[Any] | None:
    """What a runtime can dispatch: a LocalRuntime's ``registry``, a TemporalRuntime's
    ``registrations`` (a registry or a set of (kind, handler id)); None when unknown."""
    for name in ("registry", "registrations"):
        known = getattr(runtime, name, None)
        if isinstance(known, HandlerRegistry | frozenset):
            return known
    return None


def check_handlers(
    binding: DurableBinding,
    needs: dict[OperationKind, str],
    routed: Mapping[tuple[OperationKind, str], str] | None = None,
) -> None:
    """Raise unless each kind ``needs`` names is configured in ``Handlers`` and, like each
    (kind, handler id) of ``routed``, registered with the runtime (when it says)."""
    registered = _registered(binding.runtime)
    problems: list[str] = []
    for (family, own), why in (routed or {}).items():
        if registered is not None and (family, own) not in registered:
            problems.append(
                f"{family.value} handler {own!r} is not registered with the runtime "
                f"({why}); register it in the workers (zincir.mcp.serve_mcp for an MCP server)"
            )
    for kind, why in needs.items():
        handler_id = binding.handlers.for_kind(kind)
        if handler_id is None:
            problems.append(f"Handlers({kind.value}=...) is not configured ({why})")
        elif registered is not None and (kind, handler_id) not in registered:
            problems.append(
                f"{kind.value} handler {handler_id!r} is not registered with the runtime "
                f"({why}); call serve(registry, agent, handlers) in its workers and register "
                "it with the runtime"
            )
    if problems:
        raise MissingDurableHandler(
            "the durable run cannot start: " + "; ".join(problems), run_id=binding.run_id
        )
