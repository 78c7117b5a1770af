"""Approve a paused call with edited arguments: ``Approve(arguments={...})``.

The tool runs once with the edited arguments, the model's next request shows the call with
them and its result, the approval records both digests and who decided, and a run killed
right after the decision finishes the same way in a new process. Edited arguments that fail
the tool's schema are refused before anything is stored; recorded from another process
(``decide``), they are refused on resume and the call waits for a new decision."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent.edit_agents import ASKED, CALL, LOG_ENV, PROMPT, agent, entries
from tests.conftest import REPO
from tests.helpers import select
from zincir import InvalidInput
from zincir.agent import (
    Approve,
    Runner,
    args_sha256,
    decide,
    pending_approvals,
)
from zincir.payloads import ApprovalDecision

WORKER = Path(__file__).with_name("edit_agents.py")
EDITED = {"order_id": "A-17", "amount_cents": 1000}


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "edit.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    return path


def tool_runs(log: Path) -> list[dict[str, Any]]:
    return [entry["arguments"] for entry in entries(log) if entry.get("tool") == "refund"]


def model_saw(log: Path) -> list[dict[str, Any]]:
    return [entry["model"] for entry in entries(log) if "model" in entry]


def approval_row(target: str, run_id: str) -> tuple[Any, ...]:
    [row] = select(
        target,
        "SELECT args_sha256, edited_args_sha256, decided_by, decision FROM approvals "
        "WHERE run_id = ?",
        (run_id,),
    )
    return tuple(row)


def snapshot(target: str, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the run owns that a decision could write."""
    return {
        "events": select(
            target, "SELECT seq, type, payload FROM events WHERE run_id = ?", (run_id,)
        ),
        "operations": select(
            target, "SELECT step_id, sequence, status FROM operations WHERE run_id = ?", (run_id,)
        ),
        "approvals": select(target, "SELECT * FROM approvals WHERE run_id = ?", (run_id,)),
        "run": select(target, "SELECT * FROM agent_runs WHERE id = ?", (run_id,)),
        "messages": select(target, "SELECT * FROM messages WHERE to_run_id = ?", (run_id,)),
    }


def decided_event(target: str, run_id: str) -> dict[str, Any]:
    [(payload,)] = select(
        target,
        "SELECT payload FROM events WHERE run_id = ? AND type = 'approval_decided'",
        (run_id,),
    )
    loaded: dict[str, Any] = json.loads(payload)
    return loaded


def assert_ran_edited(log: Path, target: str, run_id: str, decided_by: str | None) -> None:
    """The tool ran once, with the edited arguments; the model saw them and the result; the
    approval and the decision's event hold both digests."""
    assert tool_runs(log) == [EDITED]
    assert model_saw(log) == [
        {"calls": [{"id": CALL, "arguments": EDITED}], "results": ["refunded 1000 on A-17"]}
    ]
    model, edited, by, decision = approval_row(target, run_id)
    assert (model, edited, by) == (args_sha256(ASKED), args_sha256(EDITED), decided_by)
    assert ApprovalDecision.from_json(decision).override_arguments == EDITED
    event = decided_event(target, run_id)
    assert event["model_args_sha256"] == args_sha256(ASKED)
    assert event["edited_args_sha256"] == event["args_sha256"] == args_sha256(EDITED)


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}


# -- the Approve document ---------------------------------------------------------------


def test_arguments_and_override_arguments_name_the_same_edit() -> None:
    assert Approve(arguments=EDITED).edited == EDITED == Approve(EDITED).edited
    assert Approve(arguments=EDITED, override_arguments=dict(EDITED)).edited == EDITED
    with pytest.raises(InvalidInput, match="both arguments and override_arguments"):
        Approve(arguments=EDITED, override_arguments=ASKED)
    with pytest.raises(InvalidInput, match="decided_by"):
        Approve(decided_by="")


# -- through the agent: Runner.resume and agent.resume --------------------------------


async def test_an_edited_approval_runs_the_tool_once_with_its_arguments(
    store_target: str, log: Path
) -> None:
    async with Runner(store_target, [agent]) as runner:
        paused = await runner.run(agent, PROMPT, run_id="edit")
        assert paused.paused is not None and tool_runs(log) == []
        done = await runner.resume("edit", {CALL: Approve(arguments=EDITED, decided_by="alice")})
        assert done.output == "done"
        again = await runner.resume("edit")
    assert again.output == "done"
    assert_ran_edited(log, store_target, "edit", "alice")


async def test_override_arguments_edit_the_call_the_same_way(store_target: str, log: Path) -> None:
    async with Runner(store_target, [agent]) as runner:
        await runner.run(agent, PROMPT, run_id="override")
        await runner.resume("override", {CALL: Approve(override_arguments=EDITED)})
    assert_ran_edited(log, store_target, "override", None)


async def test_the_direct_path_shows_the_model_the_edited_call(log: Path) -> None:
    paused = await agent.run(PROMPT)
    assert paused.paused is not None
    done = await agent.resume(paused.paused, {CALL: Approve(arguments=EDITED)})
    assert done.output == "done"
    assert tool_runs(log) == [EDITED]
    assert model_saw(log)[0]["calls"] == [{"id": CALL, "arguments": EDITED}]


async def test_edited_arguments_that_fail_the_schema_are_refused_with_nothing_stored(
    store_target: str, log: Path
) -> None:
    bad = {"order_id": "A-17", "amount_cents": "lots"}
    async with Runner(store_target, [agent]) as runner:
        paused = await runner.run(agent, PROMPT, run_id="bad")
        assert paused.paused is not None
        before = snapshot(store_target, "bad")
        with pytest.raises(InvalidInput) as raised:
            await runner.resume("bad", {CALL: Approve(arguments=bad)})
        message = str(raised.value)
        assert raised.value.run_id == "bad"
        assert "'refund'" in message and repr(CALL) in message and "[run bad]" in message
        binding = runner._binding(agent, "bad")
        with pytest.raises(InvalidInput, match="fail its schema"):
            await agent.resume(paused.paused, {CALL: Approve(arguments=bad)}, durable=binding)
        assert snapshot(store_target, "bad") == before
        assert tool_runs(log) == []
        # the call still waits, and a valid edit runs it
        done = await runner.resume("bad", {CALL: Approve(arguments=EDITED)})
    assert done.output == "done" and tool_runs(log) == [EDITED]
    direct = await agent.run(PROMPT)
    assert direct.paused is not None
    with pytest.raises(InvalidInput, match="fail its schema"):
        await agent.resume(direct.paused, {CALL: Approve(arguments=bad)})


# -- a decision recorded elsewhere ----------------------------------------------------


def decide_elsewhere(target: str, approval_id: str, edited: dict[str, Any], by: str) -> None:
    """``decide`` in another process, which has no tool to check the arguments against."""
    script = (
        "import asyncio, json, sys\n"
        "from zincir.agent import Approve, decide\n"
        "from zincir.store import open_store\n"
        "async def main():\n"
        "    store = open_store(sys.argv[1])\n"
        "    try:\n"
        "        await decide(store, sys.argv[2], Approve(arguments=json.loads(sys.argv[3])),\n"
        "                     decided_by=sys.argv[4])\n"
        "    finally:\n"
        "        await store.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, target, approval_id, json.dumps(edited), by],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


async def test_a_decision_from_another_process_runs_with_its_edited_arguments(
    store_target: str, log: Path
) -> None:
    async with Runner(store_target, [agent]) as runner:
        await runner.run(agent, PROMPT, run_id="elsewhere")
        [waiting] = await pending_approvals(runner.store, "elsewhere")
        decide_elsewhere(store_target, waiting.approval_id, EDITED, "bob")
        assert await pending_approvals(runner.store, "elsewhere") == []
        done = await runner.resume("elsewhere")
    assert done.output == "done"
    assert_ran_edited(log, store_target, "elsewhere", "bob")


async def test_edited_arguments_from_another_process_that_fail_the_schema_leave_the_run_paused(
    store_target: str, log: Path
) -> None:
    bad = {"order_id": "A-17", "amount_cents": "lots"}
    async with Runner(store_target, [agent]) as runner:
        await runner.run(agent, PROMPT, run_id="later")
        [waiting] = await pending_approvals(runner.store, "later")
        decide_elsewhere(store_target, waiting.approval_id, bad, "bob")
        with pytest.raises(InvalidInput) as raised:
            await runner.resume("later")
        assert raised.value.run_id == "later"
        assert repr(CALL) in str(raised.value) and "fail its schema" in str(raised.value)
        assert tool_runs(log) == []
        [(status,)] = select(store_target, "SELECT status FROM agent_runs WHERE id = 'later'")
        assert status == "running"
        [again] = await pending_approvals(runner.store, "later")  # open for a new decision
        assert again.decision is None and again.arguments == ASKED
        decided = await decide(runner.store, again.approval_id, Approve(arguments=EDITED))
        assert decided.edited_args_sha256 == args_sha256(EDITED)
        done = await runner.resume("later")
    assert done.output == "done" and tool_runs(log) == [EDITED]


# -- a SIGKILL right after the decision is stored ----------------------------------------


@pytest.mark.crash
async def test_an_edited_approval_survives_a_sigkill_after_the_decision(
    store_target: str, log: Path
) -> None:
    async with Runner(store_target, [agent]) as runner:
        assert (await runner.run(agent, PROMPT, run_id="killed")).paused is not None
    child = subprocess.run(
        [sys.executable, str(WORKER), store_target, "killed", "A-17", "1000"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert tool_runs(log) == []  # killed after the decision, before the tool
    assert approval_row(store_target, "killed")[1:3] == (args_sha256(EDITED), "alice")
    async with Runner(store_target, [agent]) as runner:
        done = await runner.resume("killed")
    assert done.output == "done"
    assert_ran_edited(log, store_target, "killed", "alice")


# -- the command line -------------------------------------------------------------------


def approvals_cli(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.pop("ZINCIR_DATABASE_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "zincir", "approvals", *args, "--db", target],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_cli_approves_with_edited_arguments_and_lists_them(
    store_target: str, log: Path
) -> None:
    async with Runner(store_target, [agent]) as runner:
        await runner.run(agent, PROMPT, run_id="cli")
        await runner.run(agent, PROMPT, run_id="cli-alias")
    edited = json.dumps(EDITED)
    done = approvals_cli(
        store_target, "approve", f"cli/{CALL}", "--arguments", edited, "--by", "carol"
    )
    assert done.returncode == 0, done.stderr
    alias = approvals_cli(store_target, "approve", f"cli-alias/{CALL}", "--override", edited)
    assert alias.returncode == 0, alias.stderr

    listed = approvals_cli(store_target, "list", "--all", "--run", "cli")
    assert listed.returncode == 0, listed.stderr
    header, line = listed.stdout.splitlines()
    assert header.split()[-3:] == ["decision", "by", "arguments"]
    assert line.split()[7:9] == ["approved-edited", "carol"]  # after since, expires
    assert line[header.index("arguments") :] == json.dumps(EDITED)  # what runs
    assert approvals_cli(store_target, "list", "--run", "cli").stdout == "no approvals waiting\n"
    [item] = json.loads(
        approvals_cli(store_target, "list", "--all", "--json", "--run", "cli").stdout
    )
    assert item["arguments"] == ASKED and item["edited_arguments"] == EDITED
    assert item["args_sha256"] == args_sha256(ASKED)
    assert item["edited_args_sha256"] == args_sha256(EDITED)
    assert (item["decision"], item["decided_by"]) == ("approve", "carol")
    [aliased] = json.loads(
        approvals_cli(store_target, "list", "--all", "--json", "--run", "cli-alias").stdout
    )
    assert aliased["edited_arguments"] == EDITED and aliased["decided_by"]  # the OS user

    async with Runner(store_target, [agent]) as runner:
        assert (await runner.resume("cli")).output == "done"
    assert_ran_edited(log, store_target, "cli", "carol")


# -- a run approved with override_arguments before edits were shown ----------------------

PRE_EDIT_DB = Path(__file__).with_name("pre_edit_approval.db")
"""A run of ``edit_agents.agent`` (id ``x``) written by zincir before the model was shown
edited calls: paused, approved with ``Approve({"order_id": "A-17", "amount_cents": 1000})``
and killed with ``ZINCIR_CRASH_AT=agent.response_logged:3`` (its last response recorded,
the run not completed). Made with the code of commit 1d74d90."""


async def test_a_run_edited_before_edits_were_shown_replays_without_drift(
    tmp_path: Path, log: Path
) -> None:
    db = tmp_path / "pre_edit.db"
    db.write_bytes(PRE_EDIT_DB.read_bytes())
    async with Runner(db, [agent]) as runner:
        done = await runner.resume("x")
    assert done.output == "done" and done.paused is None
    assert tool_runs(log) == [] and model_saw(log) == []  # all replayed from the records
