"""Fuzzed values through the run API: accepted and read back as stored, or refused with a
zincir error and nothing stored; never a run that cannot be read afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zincir
from tests.helpers import rows
from zincir import AgentContext, ToolCall

KEYS = st.one_of(
    st.text(max_size=4),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=16),
    st.sampled_from(["\ud800", "a\udc80"]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["\udfff", "x\ud83d"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(KEYS, children, max_size=3),
    ),
    max_leaves=12,
)
IDS = st.one_of(st.text(min_size=0, max_size=6), st.sampled_from(["\udc80", "a\x00", "x" * 300]))


def _log(db: Path) -> list[Any]:
    return rows(db, "SELECT seq, type, payload FROM events ORDER BY run_id, seq")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES, call_id=IDS)
def test_values_and_ids_are_stored_as_given_or_refused(
    tmp_path_factory: Any, value: Any, call_id: Any
) -> None:
    db = tmp_path_factory.mktemp("fuzz") / "fuzz.db"

    async def scenario() -> None:
        store = zincir.open_store(db)
        ctx = await AgentContext.create(store, name="fuzz", run_id="fuzz")
        try:
            for attempt in (
                lambda: ctx.record_response(value, [ToolCall(call_id, "t", {"v": value})]),
                lambda: ctx.record_tool_result(call_id, value),
                lambda: ctx.checkpoint({"completed": [value]}, lambda c: zincir.Verification(True)),
            ):
                before = _log(db)
                try:
                    await attempt()
                except zincir.ZincirError:
                    assert _log(db) == before  # refused: nothing stored
            state = await ctx.state()  # whatever was accepted reads back
            await ctx.pending_tools()
            events = await store.list_events("fuzz")
            assert len(events) == state.last_seq
            for event in events:
                if event.type == "llm_call":
                    assert event.payload["content"] == _as_json(value)
        finally:
            await ctx.close()
            await store.close()

    asyncio.run(scenario())


def _as_json(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists)."""
    if isinstance(value, list | tuple):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items()}
    return value
