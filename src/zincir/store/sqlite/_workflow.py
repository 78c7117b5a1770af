"""Workflow operations: steps, timers and waits, messages and child runs, one mixin each."""

from __future__ import annotations

from .._children import ChildOps
from .._messages import MessageOps
from .._steps import StepOps
from .._timers import TimerOps

__all__ = ["WorkflowOps"]


class WorkflowOps(TimerOps, MessageOps, ChildOps, StepOps):
    """Durable steps, sleep, messages and child runs of workflow contexts."""
