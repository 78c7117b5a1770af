"""Workflow operations: steps, timers and waits, messages and child runs, one mixin each."""

from __future__ import annotations

from .._children import ChildOps
from .._messages import MessageOps
from .._timers import TimerOps
from ._steps import PostgresStepOps

__all__ = ["WorkflowOps"]


class WorkflowOps(TimerOps, MessageOps, ChildOps, PostgresStepOps):
    """Durable steps, sleep, messages and child runs of workflow contexts."""
