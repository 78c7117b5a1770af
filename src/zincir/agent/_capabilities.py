"""Capabilities: toolsets the model loads mid-run with the built-in ``load_capability`` tool.

``load_capability`` has origin ``workflow``: it runs in the agent process and has no
external effect, so a replay runs it again freely. Which capabilities are loaded is read
from the conversation itself (the returns of earlier ``load_capability`` calls), so a
replayed or resumed run offers exactly the tools the original run offered at each request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._errors import InvalidInput
from .._validate import check_id
from ..contract.payloads import Message, ToolReturnPart
from ._tools import Tool, ToolFunction, ToolOrigin, Toolset

__all__ = ["LOAD_CAPABILITY", "capability_toolsets", "load_capability_tool", "loaded_capabilities"]

LOAD_CAPABILITY = "load_capability"


def capability_toolsets(
    capabilities: Mapping[str, Toolset | Iterable[Tool | ToolFunction]] | None,
) -> dict[str, Toolset]:
    """Each capability name with its toolset (a list of tools becomes a static toolset)."""
    if capabilities is None:
        return {}
    if not isinstance(capabilities, Mapping):
        raise InvalidInput("capabilities must map a name to a Toolset (or a list of tools)")
    toolsets: dict[str, Toolset] = {}
    for name, value in capabilities.items():
        check_id(name, "a capability name")
        toolsets[name] = value if isinstance(value, Toolset) else Toolset(value, id=name)
    return toolsets


def load_capability_tool(names: Sequence[str]) -> Tool:
    """The built-in tool that loads one of ``names`` for the rest of the run."""
    available = sorted(names)

    async def load_capability(name: str) -> dict[str, Any]:
        if name not in available:
            return {"error": f"unknown capability {name!r}", "available": available}
        return {"loaded": name}

    return Tool(
        load_capability,
        name=LOAD_CAPABILITY,
        description=(
            "Load a capability (a group of tools) for the rest of this run. "
            f"Available: {', '.join(available)}."
        ),
        origin=ToolOrigin.WORKFLOW,
    )


def loaded_capabilities(messages: Iterable[Message], known: Iterable[str]) -> list[str]:
    """The capabilities the conversation has loaded so far, in the order they were loaded;
    a conversation that extends the one asked last is read from its new messages on."""
    global _LAST
    names = set(known)
    conversation = tuple(messages)
    start, loaded = 0, []
    last = _LAST
    if last is not None:
        seen, seen_names, seen_loaded = last
        if (
            seen_names == names
            and len(seen) <= len(conversation)
            and conversation[: len(seen)] == seen
        ):
            start, loaded = len(seen), list(seen_loaded)
    _read_loaded(conversation[start:], names, loaded)
    _LAST = (conversation, names, tuple(loaded))
    return loaded


_LAST: tuple[tuple[Message, ...], set[str], tuple[str, ...]] | None = None
"""The conversation last asked about, its capability names, and what it had loaded."""


def _read_loaded(messages: Iterable[Message], names: set[str], loaded: list[str]) -> None:
    """Append to ``loaded`` the capabilities ``messages`` load, in order."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == LOAD_CAPABILITY:
                content = part.content
                name = content.get("loaded") if isinstance(content, dict) else None
                if isinstance(name, str) and name in names and name not in loaded:
                    loaded.append(name)
