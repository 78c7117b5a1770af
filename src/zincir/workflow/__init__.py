"""Workflows: durable steps, sleep, messages and child runs (SPEC §6)."""

from .._errors import WorkflowSuspended
from ._children import ChildResult
from ._context import DEFAULT_POLL_INTERVAL, WorkflowContext
from ._core import Sleeper
from ._messages import Message, send_message

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "ChildResult",
    "Message",
    "Sleeper",
    "WorkflowContext",
    "WorkflowSuspended",
    "send_message",
]
