"""Workflows: durable steps, sleep, messages and child runs."""

from .._errors import WorkflowSuspended
from .._validate import DEFAULT_POLL_INTERVAL
from ..store import ChildResult, ReceivedMessage
from ._context import WorkflowContext
from ._core import Sleeper
from ._messages import send_message

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "ChildResult",
    "ReceivedMessage",
    "Sleeper",
    "WorkflowContext",
    "WorkflowSuspended",
    "send_message",
]
