"""Durable runtimes: the DurableRuntime protocol, handlers and the local runtime."""

from ._command import CommandHandler
from ._local import LocalRuntime
from ._protocol import DurableRuntime
from ._registry import DocumentHandler, Handler, HandlerRegistry, dispatch, outcome_of
from ._retry import RetryPolicy

__all__ = [
    "CommandHandler",
    "DocumentHandler",
    "DurableRuntime",
    "Handler",
    "HandlerRegistry",
    "LocalRuntime",
    "RetryPolicy",
    "dispatch",
    "outcome_of",
]
