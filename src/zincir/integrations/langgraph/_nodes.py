"""Graph namespaces: zincir work inside a running LangGraph node gets identities of its own.

LangGraph puts the running task's position in its config: ``metadata["langgraph_node"]``
(the node's name), ``["langgraph_step"]`` (the super-step) and
``["langgraph_checkpoint_ns"]`` (``parent:task-id|node:task-id`` for a subgraph's node;
``node:task-id`` at the top). The task id is derived from the checkpoint the super-step
started from, so the task run again after a crash has the same one, and two tasks of one
super-step (two nodes, or two ``Send`` to one node) never share it.

An agent run started in a node (``agent.run`` / ``run_stream`` with a binding, or
``Runner.run``) runs as its own zincir run ``<run-id>.graph.<node>.step.<n>.<task-id>``
(``<run-id>`` being the binding's, or the agent's name for a Runner given no run id), with
step ids under ``<namespace>.graph.<node>.step.<n>``: the node run again after a crash
continues that run, replaying what it recorded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from langgraph.config import get_config

from ...agent import DurableBinding
from ...agent._binding import escape_node_id

__all__ = ["GraphNode", "agent_run_binding", "node_binding", "running_node"]

_MAX_RUN_ID = 256


@dataclass(frozen=True, slots=True)
class GraphNode:
    """Where the running LangGraph task is: its node, super-step, task id and the names of
    the nodes of the parent graphs holding it (outermost first)."""

    node: str
    step: int
    task_id: str
    parents: tuple[str, ...] = ()


def running_node() -> GraphNode | None:
    """The LangGraph task this code runs in, or None outside one."""
    try:
        config: Any = get_config()
    except RuntimeError:
        return None
    metadata = config.get("metadata") or {}
    node, step = metadata.get("langgraph_node"), metadata.get("langgraph_step")
    if not isinstance(node, str) or not node or isinstance(step, bool):
        return None
    if not isinstance(step, int) or step < 0:
        return None
    namespace = metadata.get("langgraph_checkpoint_ns")
    if not isinstance(namespace, str) or not namespace:
        namespace = (config.get("configurable") or {}).get("checkpoint_ns") or ""
    levels = [level.partition(":") for level in str(namespace).split("|") if level]
    task_id = levels[-1][2] if levels and levels[-1][0] == node else ""
    parents = tuple(name for name, _, _ in levels[:-1])
    return GraphNode(node, step, task_id, parents)


def node_binding(binding: DurableBinding) -> DurableBinding:
    """``binding`` for the running node (same run, step ids under
    ``<namespace>.graph.<node>.step.<n>``; a subgraph's node under ``graph.<parent>``
    levels), or ``binding`` itself outside a node or when it already is the node's."""
    where = running_node()
    if where is None:
        return binding
    part = _part(where)
    namespace = binding.step_namespace
    if namespace is not None and (namespace == part or namespace.endswith(f".{part}")):
        return binding  # already derived for this node (by the caller)
    scoped = binding
    if where.parents:
        levels = ".".join(f"graph.{escape_node_id(parent)}" for parent in where.parents)
        scoped = replace(
            binding, step_namespace=levels if namespace is None else f"{namespace}.{levels}"
        )
    return scoped.for_graph_node(where.node, where.step)


def agent_run_binding(binding: DurableBinding) -> DurableBinding:
    """The binding of an agent run started in the running node: :func:`node_binding` with
    its own run id, ``<run-id>.graph.<node>.step.<n>.<task-id>`` (a run's lease admits one
    loop, so two nodes of one super-step cannot share one run). A binding the caller already
    derived for this node is used as it is, run id included."""
    where = running_node()
    if where is None:
        return binding
    derived = node_binding(binding)
    if derived is binding:
        return binding
    run_id = f"{binding.run_id}.{_part(where)}"
    if where.task_id:
        run_id += f".{where.task_id}"
    data = run_id.encode("utf-8", "surrogatepass")
    if len(data) > _MAX_RUN_ID:  # a long node id: the position is hashed instead
        digest = hashlib.sha256(data).hexdigest()[:32]
        short = len(binding.run_id.encode("utf-8", "surrogatepass")) <= _MAX_RUN_ID - 40
        run_id = f"{binding.run_id}.graph.{digest}" if short else f"graph.{digest}"
    return replace(derived, run_id=run_id)


def _part(where: GraphNode) -> str:
    """The namespace levels of ``where``: ``graph.<parent>.`` per parent graph's node, then
    ``graph.<node>.step.<n>``."""
    levels = [f"graph.{escape_node_id(parent)}" for parent in where.parents]
    levels.append(f"graph.{escape_node_id(where.node)}.step.{where.step}")
    return ".".join(levels)
