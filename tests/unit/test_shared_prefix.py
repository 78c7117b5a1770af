"""The prefix a model request shares with its conversation's previous request, known from
how both were joined (zincir._prefixes): noted only where true, and exactly how long."""

from __future__ import annotations

import hashlib

from zincir._prefixes import note_shared, take_shared
from zincir.contract import Invocation, OperationKind
from zincir.contract.payloads import (
    Message,
    ModelRequest,
    TextPart,
    ToolDefinition,
    ToolReturnPart,
)


def message(run: str, n: int, size: int = 300) -> Message:
    body = f"{run} message {n} " + "x" * size
    if n % 2:
        part = ToolReturnPart(tool_call_id=f"c{n}", tool_name="read", content=body)
        return Message(role="tool", parts=(part,))
    return Message(role="assistant", parts=(TextPart(text=body),))


TOOLS = (ToolDefinition(name="read", description="Read one section. " + "d" * 300),)


def common(a: str, b: str) -> int:
    """The length of the longest common prefix, found the slow way."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_note_is_taken_for_its_very_texts_only_and_once() -> None:
    text, earlier = "".join(["ab", "cdef"]), "".join(["ab", "cdxy"])
    note_shared(text, earlier, 7)  # past the shorter text: not kept
    assert take_shared(text, earlier) == 0
    note_shared(text, earlier, 4)
    assert take_shared(text, "".join(["ab", "cdxy"])) == 0  # an equal text, not the one noted
    assert take_shared(earlier, text) == 0
    assert take_shared(text, earlier) == 4
    assert take_shared(text, earlier) == 0  # taken


def test_only_the_latest_notes_are_kept() -> None:
    texts = ["".join(["text ", str(n)]) for n in range(20)]
    for earlier, text in zip(texts, texts[1:], strict=False):
        note_shared(text, earlier, 5)
    assert take_shared(texts[1], texts[0]) == 0
    assert take_shared(texts[19], texts[18]) == 5


def test_a_grown_conversation_notes_exactly_the_prefix_it_shares() -> None:
    messages = [Message(role="user", parts=(TextPart(text="Read the catalogue."),))]
    earlier = ModelRequest(model="m", messages=tuple(messages), tools=TOOLS).to_json()
    for n in range(12):
        messages += [message("a", 2 * n), message("a", 2 * n + 1)]
        text = ModelRequest(model="m", messages=tuple(messages), tools=TOOLS).to_json()
        shared = take_shared(text, earlier)
        assert shared == common(text, earlier) > 0
        assert earlier[shared:].startswith("]")  # the earlier messages end there
        earlier = text
    assert shared > len(text) * 0.8


def test_conversations_carried_on_together_each_note_their_own_prefix() -> None:
    runs = {
        run: [Message(role="user", parts=(TextPart(text=f"prompt of {run}"),))] for run in "abc"
    }
    last: dict[str, str] = {}
    for n in range(6):
        for run, messages in runs.items():
            text = ModelRequest(model="m", messages=tuple(messages), tools=TOOLS).to_json()
            if run in last:
                shared = take_shared(text, last[run])
                assert shared == common(text, last[run]) > 0
            last[run] = text
            messages.append(message(run, n))


def test_no_note_where_the_parts_before_the_messages_changed() -> None:
    messages = [Message(role="user", parts=(TextPart(text="hello"),)), message("d", 1)]
    first = ModelRequest(model="one", messages=tuple(messages)).to_json()
    messages.append(message("d", 2))
    second = ModelRequest(model="two", messages=tuple(messages)).to_json()
    assert take_shared(second, first) == 0


def test_no_note_where_the_conversation_did_not_grow_from_the_last_one() -> None:
    start = Message(role="user", parts=(TextPart(text="hello"),))
    first = ModelRequest(messages=(start, message("e", 1), message("e", 2))).to_json()
    second = ModelRequest(messages=(start, message("e", 1), message("e", 3))).to_json()
    assert take_shared(second, first) == 0
    assert ModelRequest.from_json(second).messages[2] == message("e", 3)


def test_digests_of_a_growing_conversation_are_the_sha256_of_each_whole_input() -> None:
    messages = [Message(role="user", parts=(TextPart(text="Read the catalogue."),))]
    for n in range(30):
        text = ModelRequest(model="m", messages=tuple(messages), tools=TOOLS).to_json()
        invocation = Invocation("shared-prefix", "model", n, OperationKind.MODEL_REQUEST, "h", text)
        expected = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        assert invocation.input_digest() == expected
        messages += [message("f", 2 * n, size=500 + n), message("f", 2 * n + 1)]


def test_the_arrays_kept_for_conversations_are_bounded() -> None:
    from zincir.contract import payloads

    for n in range(payloads._ARRAYS_KEPT + 8):
        start = Message(role="user", parts=(TextPart(text=f"conversation {n}"),))
        ModelRequest(messages=(start, message("g", n))).to_json()
    assert len(payloads._ARRAYS) <= payloads._ARRAYS_KEPT
    assert payloads._ARRAYS_HELD == sum(map(payloads._held, payloads._ARRAYS.values()))


def test_an_equal_but_other_earlier_conversation_lends_no_text() -> None:
    # {"x": 1} == {"x": 1.0}: equal messages, different texts
    system = Message(role="system", parts=(TextPart(text="be brief"),))

    def tool(content: object) -> Message:
        part = ToolReturnPart(tool_call_id="c", tool_name="t", content={"x": content})
        return Message(role="tool", parts=(part,))

    ModelRequest(messages=(system, tool(1))).to_json()
    later = ModelRequest(messages=(system, tool(1.0), message("h", 1)))
    assert '{"x":1.0}' in later.to_json()
    assert later.to_json() == later.model_dump_json()
