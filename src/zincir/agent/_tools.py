"""Tools the model may call: ``Tool`` / ``@tool``, ``Toolset`` and ``ToolOrigin``.

A tool's JSON Schema comes from its signature (through pydantic); its arguments are
validated against the same model before the tool is called, so a bad call goes back to the
model as a retry prompt instead of reaching the function.

Fault defaults: an ordinary exception raised by a tool function is reported to the model as
the call's result (``"<Type>: <message>"``, marked as an error) and the run goes on;
``tool_errors="fail"`` (per tool, or per agent) fails the run instead. ``RetryTool`` (or any
retryable ``OperationFailed``) asks for the call to run again after a durable delay; a
non-retryable ``OperationFailed`` persists its failure and ends the run, as from any handler.
Signals (``ApprovalRequired``, ``CallDeferred``, ``Suspend``, cancellation) always pass.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from .._errors import (
    InvalidInput,
    LeaseError,
    NotJsonSerializable,
    OperationFailed,
    RunTerminal,
)
from .._json import StrictJsonError, json_form, loads_strict
from .._validate import name_problem
from ..contract.payloads import McpRequest, RunContext, ToolCallPart, ToolDefinition, ToolOutput
from ._policies import ToolPolicy, check_policies

__all__ = [
    "DynamicTools",
    "McpRoute",
    "Tool",
    "ToolArgumentsRejected",
    "ToolErrors",
    "ToolOrigin",
    "Toolset",
    "arguments_problem",
    "as_tool",
    "call_part",
    "call_tool",
    "check_tool_errors",
    "tool",
]

ToolFunction = Callable[..., Any]
ToolErrors = Literal["report", "fail"]
"""What a tool's ordinary exception does: ``report`` it to the model, or ``fail`` the run."""
TOOL_FAILED: Final = "ToolFailed"
RETRY_TOOL: Final = "RetryTool"
_MAX_ERROR: Final = 2000


class ToolOrigin(StrEnum):
    """Where a tool's side effect runs on the durable path.

    ``application`` → a ``tool.call`` operation; ``mcp`` → an ``mcp.request`` operation;
    ``workflow`` → in the agent process, replayed freely, so it must have no external effect.
    """

    APPLICATION = "application"
    MCP = "mcp"
    WORKFLOW = "workflow"


class ToolArgumentsRejected(Exception):
    """Arguments that fail a tool's schema; ``message`` is what the model is told."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class McpRoute(Protocol):
    """Where an ``mcp``-origin tool's calls go on the durable path, and how their records read
    back (an MCP server's tools, ``zincir.mcp.MCPToolset``); without one, or with no
    ``handler_id``, ``mcp.request`` goes to ``Handlers.mcp_request``."""

    handler_id: str | None

    def request(self, call: ToolCallPart, arguments: dict[str, Any]) -> McpRequest: ...
    def output(self, call: ToolCallPart, output_json: str) -> ToolOutput: ...


class Tool:
    """A function the model may call, with its name, description and JSON Schema.

    ``tool_errors`` says what an ordinary exception of the function does (``"report"`` it
    to the model, ``"fail"`` the run); None takes the agent's ``tool_errors``. ``policies``
    (``ToolPolicy``) rewrite its arguments, refuse calls and rewrite its results, inside
    the agent's ``tool_policies``.
    """

    mcp_route: McpRoute | None = None
    tool_errors: ToolErrors | None = None
    policies: tuple[ToolPolicy, ...] = ()
    _definition: ToolDefinition | None = None

    def __init__(
        self,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        requires_approval: bool = False,
        origin: ToolOrigin | str = ToolOrigin.APPLICATION,
        tool_errors: ToolErrors | None = None,
        policies: Iterable[ToolPolicy] = (),
    ) -> None:
        if not callable(fn):
            raise InvalidInput(f"a tool needs a callable, not {type(fn).__name__}")
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__name__", "")
        problem = name_problem("a tool name", self.name, max_bytes=64)
        if problem is not None:
            raise InvalidInput(problem)
        try:
            self.origin = ToolOrigin(origin)
        except ValueError:
            raise InvalidInput(
                f"unknown tool origin {origin!r}; use one of {[o.value for o in ToolOrigin]}"
            ) from None
        self.description = description if description is not None else _summary(fn)
        self.requires_approval = bool(requires_approval)
        self.tool_errors = None if tool_errors is None else check_tool_errors(tool_errors)
        self.policies = check_policies(policies, f"the policies of tool {self.name!r}")
        self._parameters, self._arguments = _arguments_model(fn, self.name)
        self.schema = dict(schema) if schema is not None else _schema(self._arguments)

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, origin={self.origin.value!r})"

    def definition(self) -> ToolDefinition:
        """The document the model sees (the same object while the tool is unchanged, so
        each request reuses its encoded text)."""
        known = self._definition
        if (
            known is None
            or known.name != self.name
            or known.description != self.description
            or known.parameters != self.schema
        ):
            known = self._definition = ToolDefinition(
                name=self.name, description=self.description, parameters=self.schema
            )
        return known

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The validated arguments in JSON form; raises ToolArgumentsRejected."""
        return self._model(arguments).model_dump(mode="json")

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments``, call the function, return its result as JSON data."""
        return self.jsonable(await self.invoke(arguments))

    async def invoke(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` (ToolArgumentsRejected) and call the function: its result
        as it returned it."""
        instance = self._model(arguments)
        result = self.fn(**{name: getattr(instance, name) for name in self._parameters})
        if inspect.isawaitable(result):
            result = await result
        return result

    def jsonable(self, result: Any) -> Any:
        """A function's result in its JSON form (``zincir._json.json_form``, as every stored
        value); NotJsonSerializable naming the type it cannot convert."""
        return json_form(result, what=f"the result of tool {self.name!r}")

    def _model(self, arguments: Mapping[str, Any]) -> BaseModel:
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsRejected("the arguments must be a JSON object")
        try:
            return self._arguments.model_validate(dict(arguments))
        except ValidationError as error:
            raise ToolArgumentsRejected(_explain(error)) from None


@overload
def tool(fn: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    requires_approval: bool = False,
    origin: ToolOrigin | str = ToolOrigin.APPLICATION,
    tool_errors: ToolErrors | None = None,
    policies: Iterable[ToolPolicy] = (),
) -> Callable[[ToolFunction], Tool]: ...
def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
    requires_approval: bool = False,
    origin: ToolOrigin | str = ToolOrigin.APPLICATION,
    tool_errors: ToolErrors | None = None,
    policies: Iterable[ToolPolicy] = (),
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a ``Tool`` of a function: ``@tool`` or ``@tool(requires_approval=True)``.

    ``tool_errors`` overrides the agent's ``tool_errors`` for this tool (None: the agent's);
    ``policies`` are its own ``ToolPolicy`` list.
    """

    def make(function: ToolFunction) -> Tool:
        return Tool(
            function,
            name=name,
            description=description,
            schema=schema,
            requires_approval=requires_approval,
            origin=origin,
            tool_errors=tool_errors,
            policies=policies,
        )

    return make if fn is None else make(fn)


def as_tool(value: Tool | ToolFunction) -> Tool:
    """A ``Tool`` as is; a plain function wrapped with the defaults."""
    return value if isinstance(value, Tool) else Tool(value)


DynamicTools = Callable[
    [RunContext], Awaitable[Iterable[Tool | ToolFunction]] | Iterable[Tool | ToolFunction]
]


class Toolset:
    """A group of tools: static, or ``Toolset.dynamic`` (chosen per model request).

    ``durable_origins`` says which origins a toolset's tools may have; a static toolset
    knows them, a dynamic one must declare them to run durably. ``durable_handlers`` names,
    by origin, a handler id its tools route to instead of the binding's ``Handlers``.
    """

    durable_handlers: Mapping[ToolOrigin, str] = MappingProxyType({})

    def __init__(self, tools: Iterable[Tool | ToolFunction] = (), *, id: str | None = None) -> None:
        self.id = id
        self.tools: tuple[Tool, ...] = tuple(as_tool(item) for item in tools)
        self.durable_origins: frozenset[ToolOrigin] | None = frozenset(
            item.origin for item in self.tools
        )
        self._function: DynamicTools | None = None

    @classmethod
    def dynamic(
        cls,
        fn: DynamicTools,
        *,
        durable_origins: Iterable[ToolOrigin | str] | None = None,
        id: str | None = None,
    ) -> Toolset:
        """Tools chosen by ``fn(run_context)`` before each model request."""
        if not callable(fn):
            raise InvalidInput("a dynamic toolset needs a callable (RunContext) -> tools")
        toolset = cls(id=id)
        toolset._function = fn
        toolset.durable_origins = (
            None if durable_origins is None else frozenset(ToolOrigin(o) for o in durable_origins)
        )
        return toolset

    @property
    def is_dynamic(self) -> bool:
        return self._function is not None

    async def resolve(self, context: RunContext) -> tuple[Tool, ...]:
        """The tools offered for the next model request."""
        if self._function is None:
            return self.tools
        chosen = self._function(context)
        if inspect.isawaitable(chosen):
            chosen = await chosen
        return tuple(as_tool(item) for item in chosen)


def _summary(fn: ToolFunction) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].strip()


def _arguments_model(fn: ToolFunction, name: str) -> tuple[tuple[str, ...], type[BaseModel]]:
    """The parameter names and a closed pydantic model of ``fn``'s keyword arguments."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError) as error:
        raise InvalidInput(f"cannot read the signature of tool {name!r}: {error}") from None
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise InvalidInput(
                f"tool {name!r}: parameter {parameter.name!r} must be passable by keyword "
                "(no *args, **kwargs or positional-only parameters)"
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    model: type[BaseModel] = create_model(
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return tuple(fields), model


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def _explain(error: ValidationError) -> str:
    details = error.errors(include_url=False, include_context=False, include_input=False)
    lines = [
        f"{'.'.join(str(part) for part in detail['loc']) or '(arguments)'}: {detail['msg']}"
        for detail in details[:10]
    ]
    return "invalid arguments: " + "; ".join(lines) + ". Fix the arguments and call again."


def call_part(call_id: str, tool_name: str, text: str | None) -> ToolCallPart:
    """A tool call from the model's argument text; text that is not a JSON object is kept
    as ``malformed_arguments``, for the loop to send back to the model as a retry prompt."""
    if arguments_problem(text or "{}") is None:
        arguments = loads_strict(text or "{}")
        return ToolCallPart(tool_call_id=call_id, tool_name=tool_name, arguments=arguments)
    return ToolCallPart(tool_call_id=call_id, tool_name=tool_name, malformed_arguments=text or "")


def arguments_problem(text: str) -> str | None:
    """What is wrong with a call's argument text (``not valid JSON: …``), or None when it
    is a JSON object."""
    try:
        arguments = loads_strict(text)
    except StrictJsonError as error:
        return f"not valid JSON: {error}"
    if not isinstance(arguments, dict):
        return f"a JSON {type(arguments).__name__}, not an object"
    return None


def check_tool_errors(value: object) -> ToolErrors:
    """``value`` as a ``tool_errors`` setting; InvalidInput otherwise."""
    if value == "report":
        return "report"
    if value == "fail":
        return "fail"
    raise InvalidInput(f'tool_errors must be "report" or "fail", not {value!r}')


def error_text(error: BaseException) -> str:
    """An exception as the model reads it: ``"<Type>: <message>"``, bounded."""
    message = str(error)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


async def call_tool(
    tool: Tool, arguments: Mapping[str, Any], errors: ToolErrors
) -> tuple[Any, bool]:
    """Call ``tool``: its JSON result and whether it is an error report.

    An ordinary exception of the function is reported (``errors="report"``) or raised as a
    non-retryable ``ToolFailed`` (``"fail"``); a result that is not JSON data is raised.
    An ``OperationFailed`` passes as it is:
    ``RetryTool`` (or a retryable one) for the agent to retry, another to persist its
    failure and end the run; so do ``ToolArgumentsRejected``, the run's own errors (it was
    cancelled, its lease lost) and signals, which derive from BaseException.
    """
    try:
        return await tool.call(arguments), False
    except (ToolArgumentsRejected, OperationFailed, RunTerminal, LeaseError, NotJsonSerializable):
        raise  # NotJsonSerializable: the tool's result, which the model could not fix
    except Exception as error:
        return _failed(tool, error, errors)


def _failed(tool: Tool, error: Exception, errors: ToolErrors) -> tuple[Any, bool]:
    text = error_text(error)
    if errors == "report":
        return text, True
    raise OperationFailed(
        TOOL_FAILED,
        False,
        f"tool {tool.name!r} raised {text} (tool_errors='fail'; with 'report' the model "
        "would read the error and the run would go on)",
    ) from error
