"""The body of one operation an integration runs through a ``LocalRuntime``: whether it ran
in this process, and what it raised here, so the framework gets its own exception back
rather than the recorded ``OperationFailed``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._errors import OperationFailed
from ..contract import Invocation

__all__ = ["OperationBody"]


class OperationBody:
    """A handler running ``body`` once: its value recorded as ``{"value": ...}``, an
    exception as ``OperationFailed`` (retryable as ``retryable`` judges it)."""

    def __init__(
        self, body: Callable[[], Awaitable[Any]], retryable: Callable[[BaseException], bool]
    ) -> None:
        self.body = body
        self.retryable = retryable
        self.ran = False
        self.raised: BaseException | None = None

    async def __call__(self, invocation: Invocation, request: Any) -> Any:
        self.ran = True
        try:
            payload = await self.body()
        except OperationFailed as error:
            self.raised = error
            raise
        except Exception as error:
            self.raised = error
            message = str(error)[:4000]
            raise OperationFailed(type(error).__name__, self.retryable(error), message) from error
        return self.recorded(payload)

    def recorded(self, payload: Any) -> Any:
        """The output recorded for ``payload``."""
        return {"value": payload}
