"""The cut enters nested containers: an input that is an array, or holds its conversation
under another key, is cut into the same kind of pieces as a model request's messages, so a
growing one adds only its new pieces; a resumed cut equals a fresh one."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest

from zincir import _pieces
from zincir._pieces import PIECE_MIN_CHARS, compose, layout

SECTION = "lorem ipsum dolor sit amet " * 74


def composed(text: str, step: tuple[str, str, str] | None = None) -> _pieces.InputLayout:
    found = layout(text, step)
    content = dict(found.all_content())
    assert compose(found.description(), lambda wanted: {d: content[d] for d in wanted}) == text
    assert found.digest == "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    fresh = _pieces._cut(text, ())
    assert [(p.start, p.end, p.node, p.path) for p in found.pieces] == [
        (p.start, p.end, p.node, p.path) for p in fresh.pieces
    ]
    return found


def shaped(shape: str, messages: list[dict[str, Any]]) -> str:
    value: object = {
        "array": messages,
        "nested": {"tool": "summarise", "args": {"history": {"messages": messages}}},
        "mcp": {
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"messages": messages, "text": "t"}},
            "meta": {},
        },
    }[shape]
    return json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize("shape", ["array", "nested", "mcp"])
def test_a_growing_input_of_any_shape_adds_only_its_new_pieces(shape: str) -> None:
    messages: list[dict[str, Any]] = []
    known: set[str] = set()
    added = []
    for turn in range(60):
        messages.append({"role": "user", "content": f"section {turn}: {SECTION}"})
        found = composed(shaped(shape, messages), ("run", "step", shape))
        new = [(digest, body) for digest, body in found.all_content() if digest not in known]
        known.update(digest for digest, _ in new)
        added.append(sum(len(body) for _, body in new) + len(found.description()))
        if turn >= 3:  # inputs of 4 KB and more are kept to continue from
            assert found.reused == turn  # the earlier messages were not scanned again
    assert max(added[10:]) < len(SECTION) + 600


def test_an_object_with_nothing_to_cut_inside_is_one_piece() -> None:
    settings = {f"k{n}": n for n in range(60)}
    text = json.dumps({"settings": settings, "messages": []}, separators=(",", ":"))
    found = composed(text)
    (piece,) = found.pieces
    assert text[piece.start : piece.end] == json.dumps(settings, separators=(",", ":"))
    assert piece.end - piece.start >= PIECE_MIN_CHARS


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice(["x" * rng.randint(0, 600), rng.randint(0, 10**6), None, 'é"\\\n' * 40])
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {f"k{n}": random_value(rng, depth + 1) for n in range(rng.randint(0, 6))}


def test_any_json_is_cut_into_pieces_that_compose_back_exactly() -> None:
    rng = random.Random(35)
    for _ in range(500):
        value = random_value(rng)
        composed(json.dumps(value, separators=(",", ":")))
        composed(json.dumps(value, indent=1, ensure_ascii=False))
