"""Workflow operations: steps, timers and waits, messages and child runs, one mixin each."""

from __future__ import annotations

from .._messages import MessageOps
from .._timers import TimerOps
from ._children import ChildOps
from ._steps import StepOps

__all__ = ["WorkflowOps"]


class WorkflowOps(StepOps, TimerOps, MessageOps, ChildOps):
    """Durable steps, sleep, messages and child runs of workflow contexts."""
