"""The inspector shows a run's guardrails: its budget (used / limit), why it is paused,
budget and spin findings in its log, and the events compaction archived."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.testclient import TestClient

import zincir
from tests.inspector.conftest import ADDRESS, BASE_URL
from zincir import (
    AgentContext,
    Budget,
    BudgetExceeded,
    SpinRules,
    ToolCall,
    Verification,
    compact_run,
)
from zincir.inspector import create_app


async def test_budget_pause_spin_and_archived_events_are_shown(store_target: str) -> None:
    store = zincir.open_store(store_target)
    try:
        ctx = await AgentContext.create(
            store, "agent", run_id="guarded", budget=Budget(tokens=120, wall_time=3600)
        )
        usage = {"input_tokens": 40, "output_tokens": 20}
        for turn in range(3):
            await ctx.record_response(
                "same again", [ToolCall(f"c{turn}", "fetch", {"u": 1})], usage=usage
            )
            await ctx.record_tool_result(f"c{turn}", {"ok": False})
            if turn == 1:
                await ctx.checkpoint({"completed": ["two"]}, lambda c: Verification(True))
        await ctx.check_spin(SpinRules(repeated_call=3))  # warns: a spin_detected event
        try:
            await ctx.check_budget("model")  # 180 of 120 tokens: paused
        except BudgetExceeded:
            pass
        await ctx.close()
        report = await compact_run(store, "guarded")
        assert report.archived > 5
    finally:
        await store.close()

    client = TestClient(create_app(store_target, address=ADDRESS), base_url=BASE_URL)
    page = client.get("/runs/guarded")
    assert page.status_code == 200
    text = page.text
    assert "Budget" in text and "tokens 180 / 120" in text
    assert "paused: its budget ran out" in text
    assert "budget_exceeded" in text and "spin_detected" in text
    seqs = [int(seq) for seq in re.findall(r'id="e(\d+)"', text)]
    assert seqs[:3] == [1, 2, 3]  # archived events are still listed, merged by seq
    assert "workspace" not in text.split('id="checkpoints"')[1].split("</section>")[0]
    api = client.get("/api/runs/guarded").json()
    assert api["run"]["budget"]["tokens"] == 120
    assert api["run"]["stall"]["kind"] == "budget"


async def test_a_workspace_revision_is_shown_with_its_checkpoint(
    store_target: str, tmp_path: Path
) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "main.py").write_text("print(1)\n")
    store = zincir.open_store(store_target)
    try:
        ctx = await AgentContext.create(store, "coder", run_id="coder")
        outcome = await ctx.checkpoint({}, lambda c: Verification(True), workspace=folder)
        assert outcome.accepted
        revision = (await ctx.check_workspace()).revision  # type: ignore[union-attr]
        await ctx.close()
    finally:
        await store.close()
    client = TestClient(create_app(store_target, address=ADDRESS), base_url=BASE_URL)
    section = client.get("/runs/coder").text.split('id="checkpoints"')[1].split("</section>")[0]
    assert revision in section and "(1 files)" in section
