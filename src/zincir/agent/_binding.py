"""``Handlers`` (the worker-registered ids a durable run routes to) and ``DurableBinding``."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any, Final

from .._errors import InvalidInput
from .._validate import check_id, check_lease_ttl
from ..contract import OperationKind
from ..durable import DurableRuntime
from ..runs._budget import Budget, check_budget_arg
from ..runs._spin import SpinRules
from ..runs._versions import app_version_or_default
from ..store import Store, as_store

__all__ = [
    "DEFAULT_RETRY_DELAY_HANDLER",
    "DurableBinding",
    "Handlers",
    "escape_node_id",
    "in_graph_node",
]

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

DEFAULT_RETRY_DELAY_HANDLER: Final = "zincir.retry-delay"
"""The ``retry_delay`` handler id unless ``Handlers(retry_delay=...)`` names another (or
None: no timer, so the agent's retry policy must allow a single attempt)."""

_KINDS = {
    "model_request": OperationKind.MODEL_REQUEST,
    "model_stream": OperationKind.MODEL_STREAM,
    "tool_call": OperationKind.TOOL_CALL,
    "mcp_request": OperationKind.MCP_REQUEST,
    "retry_delay": OperationKind.RETRY_DELAY,
    "approval_resume": OperationKind.APPROVAL_RESUME,
    "event_delivery": OperationKind.EVENT_DELIVERY,
}


@dataclass(frozen=True, slots=True)
class Handlers:
    """The handler id of each operation kind a durable run may execute (each optional).

    ``retry_delay`` defaults to ``"zincir.retry-delay"``, which ``serve`` registers, so the
    default retries of the agent (``Agent(retry=...)``) work without configuring it.
    """

    model_request: str | None = None
    model_stream: str | None = None
    tool_call: str | None = None
    mcp_request: str | None = None
    retry_delay: str | None = DEFAULT_RETRY_DELAY_HANDLER
    approval_resume: str | None = None
    event_delivery: str | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                check_id(value, f"the {field.name} handler id")

    def configured(self) -> list[tuple[OperationKind, str]]:
        """Every (kind, handler id) that is set."""
        return [
            (kind, value)
            for name, kind in _KINDS.items()
            if (value := getattr(self, name)) is not None
        ]

    def for_kind(self, kind: OperationKind) -> str | None:
        """The handler id configured for ``kind``, or None."""
        for name, known in _KINDS.items():
            if known == kind:
                value: str | None = getattr(self, name)
                return value
        return None


@dataclass(frozen=True, slots=True)
class DurableBinding:
    """Routes an agent run through ``runtime``: one run id, its handlers, its lease.

    ``step_namespace`` prefixes every step id (``ns.model.request``) without changing
    handler ids or sequences; ``store`` holds the run's row and lease (default: the
    runtime's own store); ``app_version`` is recorded on the run when it is created
    (default ``$ZINCIR_APP_VERSION``, else unversioned); ``budget`` limits the run (set
    when it differs from the one in force, so a larger one resumes a run it paused);
    ``spin`` judges the run for spinning before each model request and tool batch;
    ``durable_stream`` (a streamed run's) appends what ``run_stream`` yields to the run's
    durable stream (``zincir.streams.read``); ``run`` writes no stream.
    """

    runtime: DurableRuntime
    run_id: str
    handlers: Handlers
    step_namespace: str | None = None
    lease_ttl: timedelta = timedelta(seconds=30)
    store: Store | None = None
    app_version: str | None = None
    budget: Budget | None = None
    spin: SpinRules | None = None
    durable_stream: bool = True

    def __post_init__(self) -> None:
        check_id(self.run_id, "a run id")
        if not callable(getattr(self.runtime, "execute", None)):
            raise InvalidInput(
                "runtime must be a DurableRuntime (an object with async execute(invocation))",
                run_id=self.run_id,
            )
        if not isinstance(self.handlers, Handlers):
            raise InvalidInput("handlers must be a zincir.agent.Handlers", run_id=self.run_id)
        if self.step_namespace is not None:
            check_id(self.step_namespace, "a step namespace", run_id=self.run_id)
        object.__setattr__(self, "lease_ttl", check_lease_ttl(self.lease_ttl, run_id=self.run_id))
        check_budget_arg(self.budget, self.run_id)
        if self.spin is not None and not isinstance(self.spin, SpinRules):
            raise InvalidInput("spin must be zincir.SpinRules", run_id=self.run_id)
        if not isinstance(self.durable_stream, bool):
            raise InvalidInput("durable_stream must be True or False", run_id=self.run_id)
        version = app_version_or_default(self.app_version, run_id=self.run_id)
        object.__setattr__(self, "app_version", version)

    def for_graph_node(self, node_id: str, step: int) -> DurableBinding:
        """This binding for graph node ``node_id`` at super-step ``step``: the same run, its
        step ids under ``<namespace>.graph.<node-id>.step.<step>`` (``graph.<node-id>.step.
        <step>`` without a namespace).

        A node id is escaped so that every node gets its own namespace: characters other
        than ASCII letters, digits, ``-`` and ``_`` become ``%XX`` per UTF-8 byte (``"plan
        v2.1"`` -> ``plan%20v2%2E1``). InvalidInput for an empty node id or a step that is
        not an int >= 0. An agent run inside a LangGraph node applies it by itself.
        """
        if not isinstance(node_id, str) or not node_id:
            raise InvalidInput(
                f"a graph node id must be a non-empty str, got {node_id!r}", run_id=self.run_id
            )
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidInput(
                f"a graph step must be an int >= 0, got {step!r}", run_id=self.run_id
            )
        part = f"graph.{escape_node_id(node_id)}.step.{step}"
        namespace = part if self.step_namespace is None else f"{self.step_namespace}.{part}"
        check_id(namespace, "the graph node's step namespace", run_id=self.run_id)
        return replace(self, step_namespace=namespace)

    def _in_graph_node(self) -> DurableBinding:
        """The binding an agent run started inside a running LangGraph node uses (see
        ``zincir.integrations.langgraph``); this binding anywhere else. Free when LangGraph
        was never imported."""
        if "langgraph.config" not in sys.modules:
            return self
        from ..integrations.langgraph._nodes import agent_run_binding

        return agent_run_binding(self)

    def step_id(self, step: str) -> str:
        """``step`` under the binding's namespace."""
        return step if self.step_namespace is None else f"{self.step_namespace}.{step}"

    def run_store(self) -> Store:
        """The store that holds the run's row and lease."""
        store: Any = self.store
        for name in ("store", "record_store"):  # LocalRuntime, TemporalRuntime
            if store is None:
                store = getattr(self.runtime, name, None)
        if store is None:
            raise InvalidInput(
                "this runtime has no store; pass DurableBinding(store=...) to hold the run",
                run_id=self.run_id,
            )
        return as_store(store)


def escape_node_id(node_id: str) -> str:
    """``node_id`` as one part of a step id: ASCII letters, digits, ``-`` and ``_`` kept,
    every other character ``%XX`` per UTF-8 byte (lone surrogates too), so distinct node ids
    never share a namespace and none adds a ``.`` level."""
    if all(char in _PLAIN for char in node_id):
        return node_id
    out: list[str] = []
    for char in node_id:
        if char in _PLAIN:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def in_graph_node() -> bool:
    """Whether this code runs inside a LangGraph node (False at no cost when LangGraph was
    never imported)."""
    if "langgraph.config" not in sys.modules:
        return False
    from ..integrations.langgraph._nodes import running_node

    return running_node() is not None
