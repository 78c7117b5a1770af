"""LangGraph checkpointers on zincir's store (``pip install "zincir[langgraph]"``).

``ZincirSaver`` (sync graphs) and ``AsyncZincirSaver`` (async graphs) implement LangGraph's
``BaseCheckpointSaver``, its extended operations (``copy_thread``, ``delete_for_runs``,
``prune``) included, on the ``langgraph_*`` tables of a zincir database::

    with ZincirSaver.from_conn_string("graph.db") as saver:
        graph = builder.compile(checkpointer=saver)

Values are stored as JSON where they are plain JSON and as LangGraph's msgpack otherwise
(``ZincirSerializer``), never pickled. Any number of processes may share one file. A thread
can be fenced (``saver.fenced(thread_id)``): a writer whose lease was taken over gets
FencedOut and stores nothing.

A zincir agent run started inside a node gets a run and step ids of that node and super-step
(graph namespaces, see ``_nodes``); ``node_binding(binding)`` gives other zincir work in a
node (a durable MCP client's requests, ``deliver_event``) the node's namespace.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.integrations.langgraph needs LangGraph: pip install "zincir[langgraph]"'
    ) from error

from ...store import ThreadLease
from ._nodes import GraphNode, node_binding, running_node
from ._saver import AsyncZincirSaver, ZincirSaver
from ._serde import ZincirSerializer

__all__ = [
    "AsyncZincirSaver",
    "GraphNode",
    "ThreadLease",
    "ZincirSaver",
    "ZincirSerializer",
    "node_binding",
    "running_node",
]
