"""The direct path: the agent process calls the model and the tools itself, nothing stored."""

from __future__ import annotations

from typing import Any

from ..contract.payloads import (
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
)
from ._models import Model, coerce_response
from ._preflight import ResolvedToolsets
from ._tools import Tool

__all__ = ["DirectExecutor"]


class DirectExecutor:
    """Calls ``model.request`` and each tool function in process."""

    run_id: str | None = None

    def __init__(self, model: Model) -> None:
        self.model = model

    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None:
        """Nothing to check: no handler is involved."""

    async def model_request(self, number: int, request: ModelRequest) -> ModelResponse:
        """Ask the model."""
        return coerce_response(await self.model.request(request), model=self.model.name)

    async def run_tool(
        self,
        number: int,
        position: int,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        retry: int,
    ) -> ToolOutput:
        """Call the tool function with its validated arguments."""
        content = await tool.call(arguments)
        return ToolOutput(tool_call_id=call.tool_call_id, tool_name=call.tool_name, content=content)

    async def record_response(self, number: int, response: ModelResponse) -> None:
        """Nothing is recorded on the direct path."""

    async def record_return(self, part: ToolReturnPart) -> None:
        """Nothing is recorded on the direct path."""
