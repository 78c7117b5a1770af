"""Lifecycle hooks: process-local observers that may see replayed steps."""

from __future__ import annotations

from ..contract.payloads import ModelRequest, ModelResponse, ToolReturnPart

__all__ = ["AgentHooks"]


class AgentHooks:
    """Override what you want to observe; hooks carry no business side effect.

    On the durable path a replayed step is observed again (its stored record), so put
    anything that must happen once behind a durable operation instead.
    """

    async def on_model_request(self, number: int, request: ModelRequest) -> None:
        """Model request ``number`` is about to be sent (or replayed)."""

    async def on_model_response(self, number: int, response: ModelResponse) -> None:
        """The response to model request ``number`` arrived (or was replayed)."""

    async def on_tool_return(self, part: ToolReturnPart) -> None:
        """A tool's result (or a retry prompt) is going back to the model."""
