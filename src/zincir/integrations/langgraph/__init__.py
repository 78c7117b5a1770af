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
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.integrations.langgraph needs LangGraph: pip install "zincir[langgraph]"'
    ) from error

from ...store import ThreadLease
from ._saver import AsyncZincirSaver, ZincirSaver
from ._serde import ZincirSerializer

__all__ = ["AsyncZincirSaver", "ThreadLease", "ZincirSaver", "ZincirSerializer"]
