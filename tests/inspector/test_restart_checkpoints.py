"""The run page lists a run's restart checkpoints: id, revision, size, updated, and the head
of the payload, escaped and cut, never the whole payload."""

from __future__ import annotations

from pathlib import Path

import zincir
from tests.inspector.conftest import client_for
from tests.inspector.html_audit import assert_inert
from tests.inspector.seed import XSS_SCRIPT
from zincir.inspector._app import run_url
from zincir.restart import SQLRestartStore

SECRET_TAIL = "the-tail-that-must-not-show"


async def test_the_run_page_lists_restart_checkpoints_escaped_and_cut(tmp_path: Path) -> None:
    db = tmp_path / "zincir.db"
    async with zincir.open_store(db) as store:
        ctx = await zincir.AgentContext.create(store, name="streamer", run_id="r-1")
        await ctx.complete()
        restart = SQLRestartStore(store)
        await restart.save("r-1", "stream:answer-v1", 7, {"delivered": 7})
        await restart.save(
            "r-1", "zincir.agent.paused", 3, {"note": XSS_SCRIPT + "x" * 400 + SECRET_TAIL}
        )
        await restart.save("other-run", "stream:elsewhere", 1, {"delivered": 1})
    page = client_for(db).get(run_url("r-1"))
    assert page.status_code == 200
    text = page.text
    assert "Restart checkpoints" in text
    assert "stream:answer-v1" in text and "zincir.agent.paused" in text
    assert "stream:elsewhere" not in text
    assert "&#34;delivered&#34;: 7" in text or "&#34;delivered&#34;:7" in text
    assert SECRET_TAIL not in text
    assert_inert(text)
