"""Checkpoints bound to a workspace: zincir hashes what the folder really holds, the verifier
sees it, and a resumed run finds out when the folder no longer matches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import select
from zincir import (
    AgentContext,
    CheckpointCandidate,
    InvalidInput,
    Verification,
    WorkspaceDrift,
)
from zincir.store import Store


def _tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('v1')\n")
    (root / "README").write_text("notes\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


async def test_the_verifier_sees_the_real_tree_and_resume_checks_it(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "ws")
    seen = []

    def verify(candidate: CheckpointCandidate) -> Verification:
        assert candidate.workspace is not None
        seen.append(candidate.workspace)
        return Verification("src/app.py" in candidate.workspace.files, {"tests": "passed"})

    ctx = await AgentContext.create(store, "coder", run_id="coder")
    outcome = await ctx.checkpoint({"completed": ["edit app"]}, verify, workspace=root)
    assert outcome.accepted
    (revision,) = seen
    assert revision.path == str(root.resolve())
    assert sorted(revision.files) == ["README", "src/app.py"]  # .git is bookkeeping
    assert revision.revision.startswith("sha256:")
    assert (await ctx.check_workspace()) == revision

    (root / ".git" / "HEAD").write_text("ref: refs/heads/other\n")  # not content
    assert (await ctx.check_workspace()) == revision
    await ctx.close()

    (root / "src" / "app.py").write_text("print('edited outside the agent')\n")
    (root / "NEW").write_text("x")
    (root / "README").unlink()
    resumed = await AgentContext.force_recover(store, "coder")
    with pytest.raises(WorkspaceDrift) as drift:
        await resumed.check_workspace()
    assert drift.value.changed == ["src/app.py"]
    assert drift.value.added == ["NEW"]
    assert drift.value.removed == ["README"]
    assert drift.value.paths == ["NEW", "README", "src/app.py"]
    assert drift.value.accepted == revision.revision
    assert "coder" in str(drift.value)

    (root / "src" / "app.py").write_text("print('v1')\n")
    (root / "NEW").unlink()
    (root / "README").write_text("notes\n")
    assert (await resumed.check_workspace()) == revision  # restored: resumable again
    moved = tmp_path / "moved"
    root.rename(moved)
    assert (await resumed.check_workspace(moved)).revision == revision.revision  # type: ignore[union-attr]
    await resumed.close()


async def test_a_later_rejected_candidate_does_not_move_the_binding(
    store: Store, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "ws")
    ctx = await AgentContext.create(store, "coder", run_id="r")
    assert await ctx.check_workspace() is None  # no workspace checkpoint yet
    await ctx.checkpoint({}, lambda c: Verification(True), workspace=root)
    (root / "src" / "app.py").write_text("broken\n")
    rejected = await ctx.checkpoint({}, lambda c: Verification(False), workspace=root)
    assert not rejected.accepted
    with pytest.raises(WorkspaceDrift) as drift:
        await ctx.check_workspace()
    assert drift.value.changed == ["src/app.py"]
    await ctx.close()


async def test_a_symlink_counts_by_its_target(store: Store, tmp_path: Path) -> None:
    root = _tree(tmp_path / "ws")
    os.symlink("src/app.py", root / "link")
    ctx = await AgentContext.create(store, "coder", run_id="s")
    await ctx.checkpoint({}, lambda c: Verification(True), workspace=root)
    (root / "link").unlink()
    os.symlink("README", root / "link")
    with pytest.raises(WorkspaceDrift) as drift:
        await ctx.check_workspace()
    assert drift.value.changed == ["link"]
    await ctx.close()


async def test_a_workspace_that_is_not_a_folder_is_refused_before_any_write(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    ctx = await AgentContext.create(store, "coder", run_id="bad")
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    before = await store.list_events("bad")
    for bad in (afile, tmp_path / "missing", 42):
        with pytest.raises(InvalidInput):
            await ctx.checkpoint({}, lambda c: Verification(True), workspace=bad)  # type: ignore[arg-type]
    assert await store.list_events("bad") == before
    assert select(store_url, "SELECT COUNT(*) FROM checkpoints WHERE run_id = ?", ("bad",)) == [
        (0,)
    ]
    await ctx.close()
