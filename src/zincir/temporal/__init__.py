"""zincir on Temporal (extra ``temporal``): ``TemporalRuntime`` and its ``Worker`` (SPEC §9).

Each invocation runs as workflow ``zincir.operation.v1``, whose id is derived from the stable
key; its activity ``zincir.execute.v1`` dispatches the handler registered with the worker.
"""

try:
    import temporalio  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.temporal needs the temporalio SDK: pip install "zincir[temporal]"'
    ) from error

from ._devserver import DevServer, find_temporal_binary
from ._runtime import ActivityTimeouts, TemporalRuntime, workflow_id_for
from ._worker import Worker
from ._workflow import ACTIVITY_NAME, WORKFLOW_NAME

__all__ = [
    "ACTIVITY_NAME",
    "ActivityTimeouts",
    "DevServer",
    "TemporalRuntime",
    "WORKFLOW_NAME",
    "Worker",
    "find_temporal_binary",
    "workflow_id_for",
]
