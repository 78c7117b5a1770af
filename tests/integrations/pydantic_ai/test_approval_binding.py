"""Decisions of a deferred-results continuation go through approval_resume: across process
restarts the persisted decision is applied, and an approval binds the arguments it lets run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent, CallDeferred  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults  # noqa: E402

import zincir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers import rows  # noqa: E402
from tests.integrations.pydantic_ai.approval_worker import model  # noqa: E402
from zincir.agent import args_sha256  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402

WORKER = Path(__file__).with_name("approval_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}


def worker(db: Path, ledger: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(WORKER), str(db), str(ledger), *argv]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=60)


def resume(db: Path, ledger: Path, **decision: object) -> subprocess.CompletedProcess[str]:
    return worker(db, ledger, "resume", json.dumps(decision))


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text("utf-8").splitlines() if ledger.exists() else []


@pytest.mark.crash
def test_an_approval_survives_a_kill_keeps_its_decision_and_binds_its_arguments(
    tmp_path: Path,
) -> None:
    db, ledger = tmp_path / "desk.db", tmp_path / "ledger.txt"
    paused = worker(db, ledger, "pause")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.splitlines() == ["paused: refund {'order': 'A-17', 'cents': 4200}"]

    # approved with an override; the process dies as the refund starts
    killed = resume(db, ledger, approve=True, override={"order": "A-17", "cents": 100}, crash=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ledger_lines(ledger) == []
    ((document, record),) = rows(
        db,
        "SELECT input_json, record FROM operations WHERE run_id = 'desk-1.resume' "
        "AND kind = 'approval_resume'",
    )
    assert json.loads(document) == {
        "operation": "approval.resume",
        "tool_call_id": "c1",
        "tool": "refund",
        "args_sha256": _sha({"order": "A-17", "cents": 4200}),
        "execution": "approval",
    }
    output = json.loads(json.loads(record)["outcome"]["success"]["output_json"])["value"]
    assert output == {
        "decision": "approve",
        "override_arguments": {"order": "A-17", "cents": 100},
        "args_sha256": _sha({"order": "A-17", "cents": 100}),
    }

    # a new process with another override: refused, nothing runs
    other = resume(db, ledger, approve=True, override={"order": "A-17", "cents": 999})
    assert other.returncode == 3, other.stderr
    assert other.stdout.startswith("refused: ApprovalMismatch: [run desk-1.resume]")
    assert _sha({"order": "A-17", "cents": 999}) in other.stdout

    # the call's own arguments changed in the history since the approval: refused
    changed = resume(
        db,
        ledger,
        approve=True,
        override={"order": "A-17", "cents": 100},
        args={"order": "A-17", "cents": 5000},
    )
    assert changed.returncode == 3, changed.stderr
    assert "ApprovalMismatch: [run desk-1.resume]" in changed.stdout
    assert _sha({"order": "A-17", "cents": 5000}) in changed.stdout
    assert ledger_lines(ledger) == []

    # a later, conflicting denial: the persisted approval is applied, the refund runs once
    denied = resume(db, ledger, deny="changed my mind")
    assert denied.returncode == 0, denied.stdout + denied.stderr
    assert denied.stdout.splitlines() == ["output: Done: refunded 100"]
    again = resume(db, ledger, approve=True, override={"order": "A-17", "cents": 100})
    assert again.stdout.splitlines() == ["output: Done: refunded 100"]
    assert ledger_lines(ledger) == ["refund A-17 100"]
    assert rows(db, "SELECT id, parent_id, status FROM agent_runs ORDER BY id") == [
        ("desk-1", None, "running"),
        ("desk-1.resume", "desk-1", "completed"),
    ]


def _sha(arguments: dict[str, object]) -> str:
    return args_sha256(arguments)


async def test_an_external_result_is_persisted_and_a_later_one_ignored(db_path: Path) -> None:

    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            FunctionModel(model),
            name="bank",
            output_type=[str, DeferredToolRequests],
            capabilities=[ZincirDurability(store)],
        )

        @agent.tool_plain
        def refund(order: str, cents: int) -> str:
            """Refund through the bank, which answers later."""
            raise CallDeferred()

        first = await agent.run("Refund order A-17.", run_id="bank-1")
        assert isinstance(first.output, DeferredToolRequests)
        outputs = [
            (
                await agent.run(
                    message_history=first.all_messages(),
                    deferred_tool_results=DeferredToolResults(calls={"c1": answer}),
                    run_id="bank-1.resume",
                )
            ).output
            for answer in ("bank: sent 4200", "bank: failed")
        ]
    assert outputs == ["Done: bank: sent 4200", "Done: bank: sent 4200"]
    query = "SELECT input_json FROM operations WHERE kind = 'approval_resume'"
    ((document,),) = rows(db_path, query)
    assert json.loads(document)["execution"] == "external"
