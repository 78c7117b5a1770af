"""Content references without a Temporal server: the store's content by digest (both
backends), what a runtime writes for a growing conversation, and how a record of a proxy is
bound back to its invocation."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from zincir import ContentMissing
from zincir.contract import Invocation, OperationKind, Record, Success
from zincir.store import Store

try:
    from zincir.temporal._content import (
        ContentRef,
        ContentStore,
        ContentWriter,
        proxy_of,
        read_text,
        rebind,
        resolve_input,
    )
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)


def conversation(run_id: str, turns: int) -> Invocation:
    messages = [{"role": "user", "content": f"turn {n}: " + "words " * 200} for n in range(turns)]
    document = json.dumps({"messages": messages, "tools": [], "settings": {"t": 0}})
    return Invocation(run_id, "model.request", 0, OperationKind.MODEL_REQUEST, "m", document)


class Counting:
    """A content store that counts the rows it is given to put."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.rows: list[int] = []

    async def put_content(self, run_id: str, items: Sequence[tuple[str, str]]) -> None:
        self.rows.append(len(items))
        await self.store.put_content(run_id, items)

    async def read_content(self, digests: Sequence[str]) -> Mapping[str, str]:
        result: Mapping[str, str] = await self.store.read_content(digests)
        return result

    async def compose_content(self, description: str, *, run_id: str | None = None) -> str:
        text: str = await self.store.compose_content(description, run_id=run_id)
        return text


async def test_a_store_keeps_content_by_digest(store: Store) -> None:
    assert isinstance(store, ContentStore)
    await store.put_content("r1", [("a" * 64, "first"), ("b" * 64, "second")])
    await store.put_content("r1", [("a" * 64, "first")])  # again: nothing changes
    assert await store.read_content(["a" * 64, "b" * 64, "c" * 64]) == {
        "a" * 64: "first",
        "b" * 64: "second",
    }
    described = json.dumps([{"p": "a" * 64}, " and ", {"p": "b" * 64}])
    assert await store.compose_content(described, run_id="r1") == "first and second"
    with pytest.raises(ContentMissing, match="c{64}"):
        await store.compose_content(json.dumps([{"p": "c" * 64}]), run_id="r1")


async def test_a_growing_conversation_writes_only_what_it_added(store: Store) -> None:
    counting = Counting(store)
    writer = ContentWriter(counting)
    first = await writer.put_input(conversation("grow", 40))
    second = await writer.put_input(conversation("grow", 41))
    assert counting.rows[0] >= 40 and 0 < counting.rows[1] <= 4
    for turns, ref in ((40, first), (41, second)):
        invocation = conversation("grow", turns)
        assert ref.sha256 == invocation.input_digest()
        assert len(ref.to_json()) < 400  # whatever the conversation's length
        text = await read_text(store, ref, run_id="grow", what="a test input")
        assert text == invocation.input_json
        resolved = await resolve_input(store, proxy_of(invocation, ref))
        assert resolved == invocation


async def test_a_reference_whose_content_differs_is_refused(store: Store) -> None:
    invocation = conversation("tampered", 30)
    ref = await ContentWriter(store).put_input(invocation)
    forged = ContentRef("sha256:" + "0" * 64, ref.size, ref.parts)
    with pytest.raises(ContentMissing, match="does not match its digest") as raised:
        await resolve_input(store, proxy_of(invocation, forged))
    assert raised.value.run_id == "tampered"
    with pytest.raises(ContentMissing, match="pass content_store="):
        await resolve_input(None, proxy_of(invocation, ref))


def test_a_reference_round_trips_and_other_inputs_are_not_one() -> None:
    ref = ContentRef("sha256:" + "1" * 64, 123, '[{"n":"x"},"]"]')
    assert ContentRef.parse(ref.to_json()) == ref
    for text in ("{}", "[]", "not json", '{"zincir_content": 1}', '{"zincir_content": {}}'):
        assert ContentRef.parse(text) is None
    both = json.dumps({"zincir_content": json.loads(ref.to_json())["zincir_content"], "x": 1})
    assert ContentRef.parse(both) is None


def test_the_record_of_a_proxy_is_bound_to_its_invocation_only() -> None:
    invocation = conversation("bind", 30)
    ref = ContentRef(invocation.input_digest(), 1, "[]")
    outcome = Success('{"ok":1}')
    record = Record.for_invocation(proxy_of(invocation, ref), outcome)
    bound = rebind(invocation, record)
    assert bound.invocation == invocation and bound.outcome == outcome
    assert bound.input_digest == invocation.input_digest()
    other = conversation("bind", 31)  # another input under the same identity: left alone
    assert rebind(other, record) is record
    assert rebind(invocation, bound) is bound
