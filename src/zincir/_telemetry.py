"""OpenTelemetry spans for what really executes (extra ``otel``); every hook is a no-op without it.

Spans go to the tracer ``zincir`` of the application's tracer provider. Nothing is traced
(and nothing is read or written for tracing) until a real provider is set. A run's first
attempt stores its span's W3C ``traceparent`` with the run; a later attempt, in any process,
parents its span on the stored one, so one run is one trace. Replayed records emit nothing:
the hooks sit where a handler, a step body or a pause really runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from .contract import Invocation, Outcome

__all__ = [
    "Operation",
    "RunAttempt",
    "operation",
    "pause_span",
    "run_context",
    "start_run",
    "step_span",
]

_SCOPE: Final = "zincir"
_MISSING: Final = object()
_otel: Any = _MISSING  # the opentelemetry.trace module, or None when it cannot be imported
_cached: tuple[object, Tracer] | None = None
# The start of a ModelRequest document as zincir writes it: its model without parsing the
# whole conversation.
_MODEL: Final = re.compile(r'^\{"version":1,"model":("(?:[^"\\]|\\.)*")')


def _trace() -> Any:
    """The ``opentelemetry.trace`` module, or None when OpenTelemetry is not installed."""
    global _otel
    if _otel is _MISSING:
        try:
            import opentelemetry.trace

            _otel = opentelemetry.trace
        except ImportError:
            _otel = None
    return _otel


@lru_cache(maxsize=1)
def _no_op_providers(trace: Any) -> tuple[type, ...]:
    """The provider types that trace nothing (the default before one is set)."""
    return (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def tracer() -> Tracer | None:
    """zincir's tracer from the configured provider; None while none is set (no-op)."""
    global _cached
    trace = _trace()
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _no_op_providers(trace)):
        return None
    if _cached is None or _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_SCOPE))
    return _cached[1]


# -- run attempts -----------------------------------------------------------------------


class RunAttempt:
    """The span of one attempt at a run, made current until :meth:`end` (no-op without one)."""

    def __init__(self, span: Span | None = None, token: object = None) -> None:
        self.span = span
        self._token = token

    def context(self) -> Context | None:
        """An OpenTelemetry context whose current span is this attempt's (None: no-op)."""
        if self.span is None:
            return None
        trace = _trace()
        context: Context = trace.set_span_in_context(self.span)
        return context

    def end(self, error: BaseException | None = None) -> None:
        """End the span (once), marking it failed with ``error``, and restore the context
        it replaced."""
        span, self.span = self.span, None
        if span is None:
            return
        if error is not None:
            _failed(span, error)
        span.end()
        if self._token is not None:
            from opentelemetry import context

            token, self._token = self._token, None
            context.detach(token)  # type: ignore[arg-type]


async def start_run(
    store: object, run_id: str, name: str, attributes: dict[str, Any], *, current: bool
) -> RunAttempt:
    """Start the span of an attempt at run ``run_id``: a child of the run's stored trace
    context, else (its first attempt) of the current context, whose new span's context is
    then stored with the run. ``current`` attaches it as the current span until ``end``."""
    found = tracer()
    if found is None:
        return RunAttempt()
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    trace = _trace()
    propagator = TraceContextTextMapPropagator()
    stored = await _quiet(store, "load_trace_context", run_id)
    parent = _stored_parent(stored) if isinstance(stored, str) else None
    span = found.start_span(
        name, context=parent, attributes={"zincir.run_id": run_id, **attributes}
    )
    if stored is None and span.get_span_context().is_valid:
        carrier: dict[str, str] = {}
        propagator.inject(carrier, trace.set_span_in_context(span))
        if "traceparent" in carrier:
            await _quiet(store, "save_trace_context", run_id, carrier["traceparent"])
    token = context.attach(trace.set_span_in_context(span)) if current else None
    return RunAttempt(span, token)


async def run_context(store: object, run_id: str) -> Context | None:
    """The context of run ``run_id``'s stored trace, for a span made where no attempt of
    the run is current (a Temporal activity); None (the current context) without a
    provider, a stored trace, or when the current span is already in the run's trace."""
    if tracer() is None:
        return None
    stored = await _quiet(store, "load_trace_context", run_id)
    return _stored_parent(stored) if isinstance(stored, str) else None


def _stored_parent(stored: str) -> Context | None:
    """The context a stored ``traceparent`` names; None when it is invalid or the current
    span is already in its trace (a step running an agent, a traced Temporal activity)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    trace = _trace()
    here = trace.get_current_span().get_span_context()
    parent: Context = TraceContextTextMapPropagator().extract({"traceparent": stored})
    there = trace.get_current_span(parent).get_span_context()
    if not there.is_valid or (here.is_valid and here.trace_id == there.trace_id):
        return None
    return parent


async def _quiet(store: object, method: str, *args: str) -> Any:
    """Call a store's trace method; a failure (or a store without it) costs the trace's
    continuity across attempts, never the run."""
    try:
        return await getattr(store, method)(*args)
    except Exception:
        return _MISSING


# -- operations -------------------------------------------------------------------------


class Operation:
    """A handler's execution as a span: :meth:`outcome` adds what its outcome says."""

    def __init__(self, span: Span | None, kind: str) -> None:
        self.span = span
        self.kind = kind

    def outcome(self, outcome: Outcome) -> None:
        span = self.span
        if span is None or not span.is_recording():
            return
        from .contract import Failure, Success

        if isinstance(outcome, Failure):
            span.set_attribute("error.type", outcome.error)
            span.set_status(_status(outcome.message or outcome.error))
        elif isinstance(outcome, Success):
            if self.kind in ("model_request", "model_stream"):
                span.set_attributes(_response_attributes(outcome.output_json))
            elif self.kind == "tool_call" and _is_error(outcome.output_json):
                span.set_attribute("error.type", "tool_error")
        else:
            span.set_attribute("zincir.outcome", "suspended")


@contextmanager
def operation(invocation: Invocation, parent: Context | None = None) -> Iterator[Operation]:
    """A span around one real execution of ``invocation``'s handler (GenAI conventions for
    model requests and tool calls), a child of ``parent`` (else of the current context) and
    current while it runs; a no-op without a provider."""
    found = tracer()
    kind = str(invocation.kind)
    if found is None:
        yield Operation(None, kind)
        return
    name, span_kind, attributes = _describe(invocation, kind)
    trace = _trace()
    with found.start_as_current_span(
        name, context=parent, kind=getattr(trace.SpanKind, span_kind), attributes=attributes
    ) as span:
        yield Operation(span, kind)


def _describe(invocation: Invocation, kind: str) -> tuple[str, str, dict[str, Any]]:
    """The span name, kind and attributes of an invocation."""
    attributes: dict[str, Any] = {
        "zincir.run_id": invocation.run_id,
        "zincir.step_id": invocation.step_id,
        "zincir.sequence": invocation.sequence,
        "zincir.operation.kind": kind,
        "zincir.handler_id": invocation.handler_id,
    }
    if kind in ("model_request", "model_stream"):
        model = _model_of(invocation.input_json)
        attributes["gen_ai.operation.name"] = "chat"
        if model:
            attributes["gen_ai.request.model"] = model
        return (f"chat {model}" if model else "chat"), "CLIENT", attributes
    document = _loads(invocation.input_json)
    if kind == "tool_call":
        call = document.get("call") or {}
        tool = call.get("tool_name", "")
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool
        if call.get("tool_call_id"):
            attributes["gen_ai.tool.call.id"] = call["tool_call_id"]
        return f"execute_tool {tool}", "INTERNAL", attributes
    if kind == "mcp_request":
        method = str(document.get("method", ""))
        attributes["mcp.method.name"] = method
        params = document.get("params") or {}
        target = params.get("name") if isinstance(params, dict) else None
        if method == "tools/call" and isinstance(target, str):
            attributes["gen_ai.operation.name"] = "execute_tool"
            attributes["gen_ai.tool.name"] = target
        return (f"{method} {target}" if isinstance(target, str) else method), "CLIENT", attributes
    return f"zincir {kind}", "INTERNAL", attributes


def _model_of(input_json: str) -> str:
    """The model a ModelRequest document names, read from its start when zincir wrote it."""
    match = _MODEL.match(input_json)
    if match is not None:
        return str(json.loads(match.group(1)))
    return str(_loads(input_json).get("model", ""))


def _response_attributes(output_json: str) -> dict[str, Any]:
    """GenAI attributes of a ModelResponse document: model, token usage, finish reason."""
    response = _loads(output_json)
    usage = response.get("usage") or {}
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": int(usage.get("input_tokens", 0)),
        "gen_ai.usage.output_tokens": int(usage.get("output_tokens", 0)),
    }
    if response.get("model_name"):
        attributes["gen_ai.response.model"] = str(response["model_name"])
    if response.get("finish_reason"):
        attributes["gen_ai.response.finish_reasons"] = [str(response["finish_reason"])]
    if response.get("provider_response_id"):
        attributes["gen_ai.response.id"] = str(response["provider_response_id"])
    return attributes


def _is_error(output_json: str) -> bool:
    return _loads(output_json).get("is_error") is True


def _loads(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# -- steps and pauses -------------------------------------------------------------------


@contextmanager
def step_span(run_id: str, name: str, parent: Context | None) -> Iterator[None]:
    """A span around a workflow step body that really runs, a child of ``parent`` (the
    workflow's run attempt) and current while the body runs."""
    found = tracer()
    if found is None:
        yield
        return
    attributes = {"zincir.run_id": run_id, "zincir.step.name": name}
    with found.start_as_current_span(f"zincir step {name}", context=parent, attributes=attributes):
        yield


@contextmanager
def pause_span(
    run_id: str, calls: list[tuple[str, str]], expires: datetime | None
) -> Iterator[None]:
    """A span around recording a run's pause for approval: the calls ``(call id, tool)`` it
    waits on; their decisions arrive later as ``approval_resume`` operations."""
    found = tracer()
    if found is None:
        yield
        return
    attributes: dict[str, Any] = {
        "zincir.run_id": run_id,
        "zincir.approval.call_ids": [call_id for call_id, _ in calls],
        "gen_ai.tool.name": sorted({tool for _, tool in calls}),
    }
    if expires is not None:
        attributes["zincir.approval.expires_at"] = expires.isoformat()
    with found.start_as_current_span("zincir approval wait", attributes=attributes):
        yield


def _status(description: str) -> Any:
    from opentelemetry.trace import Status, StatusCode

    return Status(StatusCode.ERROR, description)


def _failed(span: Span, error: BaseException) -> None:
    if isinstance(error, Exception):
        span.record_exception(error)
        span.set_status(_status(f"{type(error).__name__}: {error}"))
    else:  # a suspension or cancellation: the attempt stopped, it did not fail
        span.set_attribute("zincir.stopped", type(error).__name__)
