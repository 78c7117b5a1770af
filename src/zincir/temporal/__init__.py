"""zincir on Temporal (extra ``temporal``): ``TemporalRuntime`` and its ``Worker``.

Each invocation runs as workflow ``zincir.operation.v1``, whose id is derived from the stable
key; its activity ``zincir.execute.v1`` dispatches the handler registered with the worker.
Test helpers (a local dev server) live in ``zincir.temporal.testing``.
"""

try:
    import temporalio  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.temporal needs the temporalio SDK: pip install "zincir[temporal]"'
    ) from error

from ._runtime import ActivityTimeouts, TemporalRuntime, workflow_id_for
from ._worker import Worker
from ._workflow import ACTIVITY_NAME, WORKFLOW_NAME

__all__ = [
    "ACTIVITY_NAME",
    "WORKFLOW_NAME",
    "ActivityTimeouts",
    "TemporalRuntime",
    "Worker",
    "workflow_id_for",
]
