"""Worker: serves workflow ``zincir.operation.v1`` and activity ``zincir.execute.v1`` for a
HandlerRegistry, so handlers live in worker processes and are never serialized."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker as TemporalWorker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._encryption import Encryption, resolve_encryption
from .._errors import InvalidInput
from ..durable._registry import HandlerRegistry
from ..store import Store, as_store
from ._codec import encrypted_client
from ._content import content_store_of
from ._workflow import OperationActivities, OperationWorkflow

__all__ = ["Worker"]


def default_workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox with zincir passed through: its modules are deterministic at import time,
    and re-importing the package for every workflow run would cost ~20 ms per operation."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("zincir")
    )


class Worker:
    """Polls ``task_queue`` and runs zincir operations with the handlers of ``registry``.

    Use ``async with Worker(...)`` around code that executes operations, or ``await
    worker.run()`` in a worker process. Extra keyword arguments go to
    ``temporalio.worker.Worker`` (e.g. ``max_concurrent_activities``, ``workflow_runner``).
    ``content_store`` is the zincir store the ``TemporalRuntime`` writes large inputs to
    (its ``content_store``): inputs and records longer than 64 KiB then travel through
    Temporal as references to it, and each handler's OpenTelemetry span joins its run's
    trace stored there. ``encryption`` (default: the keys in ``$ZINCIR_ENCRYPTION_KEYS``
    when it is set) seals every payload this worker writes to a workflow history and opens
    the sealed ones it reads; give the ``TemporalRuntime`` the same keys.
    """

    def __init__(
        self,
        client: Client,
        registry: HandlerRegistry,
        task_queue: str,
        *,
        content_store: Store | None = None,
        encryption: Encryption | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(registry, HandlerRegistry):
            raise InvalidInput(
                f"Worker needs a zincir HandlerRegistry, not {type(registry).__name__}"
            )
        if not isinstance(task_queue, str) or not task_queue:
            raise InvalidInput("task_queue must be a non-empty str")
        client = encrypted_client(client, resolve_encryption(encryption))
        self.client = client
        self.registry = registry
        self.task_queue = task_queue
        self.content_store = content_store
        self._activities = OperationActivities(
            registry,
            None
            if content_store is None
            else content_store_of(as_store(content_store, "content_store"), "content_store"),
        )
        options.setdefault("workflow_runner", default_workflow_runner())
        self._worker = TemporalWorker(
            client,
            task_queue=task_queue,
            workflows=[OperationWorkflow],
            activities=[self._activities.execute],
            **options,
        )

    @property
    def temporal_worker(self) -> TemporalWorker:
        """The underlying temporalio worker."""
        return self._worker

    async def run(self) -> None:
        """Poll until :meth:`shutdown` is called (or the task is cancelled)."""
        await self._worker.run()

    async def shutdown(self) -> None:
        """Stop polling and wait for running activities (up to the graceful timeout)."""
        await self._worker.shutdown()

    async def __aenter__(self) -> Worker:
        await self._worker.__aenter__()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._worker.__aexit__(kind, error, tb)
