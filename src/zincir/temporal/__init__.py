"""zincir on Temporal (extra ``temporal``): ``TemporalRuntime`` and its ``Worker``.

Each invocation runs as workflow ``zincir.operation.v1``, whose id is derived from the stable
key; its activity ``zincir.execute.v1`` dispatches the handler registered with the worker.
``encryption=`` (or ``$ZINCIR_ENCRYPTION_KEYS``) seals every payload the runtime and its
workers put in a workflow history (``EncryptionCodec``, ``data_converter``). Test helpers (a
local dev server) live in ``zincir.temporal.testing``.
"""

try:
    import temporalio  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        'zincir.temporal needs the temporalio SDK: pip install "zincir[temporal]"'
    ) from error

from ._codec import EncryptionCodec, data_converter
from ._runtime import ActivityTimeouts, TemporalRuntime, workflow_id_for
from ._worker import Worker
from ._workflow import ACTIVITY_NAME, WORKFLOW_NAME

__all__ = [
    "ACTIVITY_NAME",
    "WORKFLOW_NAME",
    "ActivityTimeouts",
    "EncryptionCodec",
    "TemporalRuntime",
    "Worker",
    "data_converter",
    "workflow_id_for",
]
