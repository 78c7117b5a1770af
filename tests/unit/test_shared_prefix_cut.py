"""An input's cut resumes after the prefix noted as shared with the step's previous input
(zincir._prefixes) without comparing it, and its digest is still that of the whole input."""

from __future__ import annotations

import hashlib

from zincir._pieces import layout
from zincir._prefixes import note_shared, take_shared
from zincir.contract.payloads import Message, ModelRequest, TextPart, ToolDefinition


class Watched(str):
    """A text that counts the characters of the prefixes (longer than one character) it is
    compared with."""

    compared = 0

    def startswith(self, prefix: object, *args: object) -> bool:  # type: ignore[override]
        if isinstance(prefix, str) and len(prefix) > 1:
            Watched.compared += len(prefix)
        return super().startswith(prefix, *args)  # type: ignore[arg-type]


TOOLS = tuple(
    ToolDefinition(name=f"tool_{n}", description=f"Tool {n}: " + "d" * 400) for n in range(2)
)


def requests(run: str, tools: tuple[ToolDefinition, ...] = ()) -> tuple[str, str]:
    messages = [Message(role="user", parts=(TextPart(text=f"{run}: read on"),))]
    texts = []
    for n in range(3):
        messages.append(Message(role="assistant", parts=(TextPart(text=f"{n} " + "x" * 5000),)))
        texts.append(ModelRequest(model="m", messages=tuple(messages), tools=tools).to_json())
    return texts[1], texts[2]


def cut(run: str, tools: tuple[ToolDefinition, ...], noted: bool) -> int:
    """The characters compared to cut the second of two requests of ``run``."""
    earlier, text = requests(run, tools)
    step = (run, "model", "model_request")
    layout(earlier, step)
    shared = take_shared(text, earlier)
    assert shared > len(earlier) // 2
    watched = Watched(text)
    if noted:
        note_shared(watched, earlier, shared)
    Watched.compared = 0
    found = layout(watched, step)
    assert found.digest == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return Watched.compared


def test_a_noted_prefix_is_not_compared() -> None:
    assert cut("noted", (), noted=True) == 0


def test_an_unnoted_prefix_is_compared() -> None:
    assert cut("unnoted", (), noted=False) > 5000


def test_pieces_past_the_noted_prefix_are_compared_from_its_end() -> None:
    # the tools' pieces follow the messages: compared, the messages are not
    assert 0 < cut("tools-noted", TOOLS, noted=True) < 2000
    assert cut("tools-unnoted", TOOLS, noted=False) > 10000
