"""A run's durable stream: every item ``run_stream`` yields, addressable by offset.

``read(store, run_id, after=offset)`` follows a run's stream from any offset to its last
item. A client applying the items in order (deltas build a partial answer per model
request, ``void`` drops it, ``message`` replaces it) ends with exactly the run's final
conversation, across disconnects, worker crashes and restarts.
"""

from ._items import (
    EVENT,
    MESSAGE,
    PART_DELTA,
    PART_END,
    PART_START,
    PAUSED,
    RESULT,
    TOOL_RESULT,
    VOID,
    StreamItem,
)
from ._read import read
from ._sse import sse_app

__all__ = [
    "EVENT",
    "MESSAGE",
    "PART_DELTA",
    "PART_END",
    "PART_START",
    "PAUSED",
    "RESULT",
    "TOOL_RESULT",
    "VOID",
    "StreamItem",
    "read",
    "sse_app",
]
