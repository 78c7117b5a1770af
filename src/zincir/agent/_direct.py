"""The direct path: the agent process calls the model and the tools itself, nothing stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ApprovalRequired, CallDeferred
from ..contract.payloads import (
    ApprovalDecision,
    ModelRequest,
    ModelResponse,
    RetryDelay,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
)
from ._approval import Execution, PausedRun, approved
from ._current import ToolCallInfo, serving_call
from ._loop import Deferred, PlannedCall, Refused, Restart
from ._models import Model, coerce_response
from ._preflight import ResolvedToolsets
from ._stream import Emit, assemble_stream, tee
from ._tools import Tool, ToolErrors, call_tool

__all__ = ["DirectExecutor"]


class DirectExecutor:
    """Calls ``model.request`` and each tool function in process."""

    run_id: str | None = None

    def __init__(self, model: Model, emit: Emit | None = None) -> None:
        self.model = model
        self.emit = emit

    async def restart_at(self, number: int) -> Restart | None:
        """Never: a direct run has no records to restart from."""
        return None

    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None:
        """Nothing to check: no handler is involved."""

    async def before_tools(self, number: int) -> None:
        """Nothing to check: a run without ``durable=`` has no budget."""

    async def model_request(
        self,
        number: int,
        request: ModelRequest,
        *,
        attempt: int = 0,
        ahead: Callable[[ModelResponse], Sequence[PlannedCall]] | None = None,
    ) -> ModelResponse:
        """Ask the model; when streaming, pass each part on as the provider sends it."""
        if self.emit is None:
            return coerce_response(await self.model.request(request), model=self.model.name)
        parts, usage = await assemble_stream(tee(self.model.stream(request), self.emit))
        return ModelResponse(parts=parts, usage=usage, model_name=self.model.name)

    async def release_ahead(self) -> None:
        """Nothing is claimed on the direct path."""

    async def wait_retry(self, number: int, delay: RetryDelay) -> None:
        """Sleep here: the direct path has no timer worker."""
        await asyncio.sleep(delay.delay_seconds)

    async def wait_tool_retry(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        delay: RetryDelay,
        *,
        approval: ApprovalDecision | None = None,
        attempt: int = 0,
    ) -> None:
        """Sleep here before a tool call runs again."""
        await asyncio.sleep(delay.delay_seconds)

    async def run_tool(
        self,
        number: int,
        position: int,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        retry: int,
        *,
        approval: ApprovalDecision | None = None,
        attempt: int = 0,
        errors: ToolErrors = "report",
        returns: Callable[[ToolOutput], ToolOutput | None] | None = None,
    ) -> ToolOutput | Deferred:
        """Call the tool function with its validated arguments; its ordinary exception is
        reported (or raised as ``ToolFailed``, per ``errors``); ``returns`` shapes the
        output (the tool policies)."""
        try:
            info = ToolCallInfo(None, call.tool_call_id, call.tool_name, call.tool_call_id)
            with approved(approval), serving_call(info):
                content, is_error = await call_tool(tool, arguments, errors)
        except ApprovalRequired:
            return Deferred("approval")
        except CallDeferred:
            return Deferred("external")
        output = ToolOutput(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            content=content,
            is_error=is_error,
        )
        return output if returns is None else (returns(output) or output)

    async def record_response(self, number: int, response: ModelResponse) -> None:
        """Nothing is recorded on the direct path."""

    async def record_return(self, part: ToolReturnPart) -> None:
        """Nothing is recorded on the direct path."""

    async def decide(
        self,
        number: int,
        position: int,
        call: ToolCallPart,
        arguments: dict[str, Any],
        execution: Execution,
        proposed: ApprovalDecision,
    ) -> ApprovalDecision:
        """The proposed decision is the one applied (no approver runs on this path)."""
        return proposed

    async def bind_approval(
        self,
        call: ToolCallPart,
        proposed: ApprovalDecision,
        digest: str,
        *,
        model_digest: str | None = None,
    ) -> None:
        """Nothing is recorded on the direct path."""

    def shown(self, call_id: str) -> str | None:
        """Never: nothing was logged before."""
        return None

    def shows_edit(self, call_id: str) -> bool:
        """The model's next request shows an edited call as it ran."""
        return True

    def set_aside(self, call: ToolCallPart, bound: str, digest: str, problem: str) -> Refused:
        """The call is asked again (nothing is recorded on the direct path)."""
        return Refused(bound, digest, problem)

    async def record_pause(self, paused: PausedRun) -> None:
        """Nothing is recorded on the direct path."""
