"""``zincir approvals list|approve|deny|result``: the real command line, in its own process,
against a database file a paused run wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import zincir
from tests.conftest import REPO
from tests.helpers import rows
from zincir.agent import args_sha256
from zincir.store import NewApproval

REFUND = {"order_id": "A-17", "amount_cents": 4200}
SHIPPING = {"order_id": "A-17"}


def zincir_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("ZINCIR_DATABASE_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "zincir", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]


def paused(db: Path) -> None:
    """Run ``run-1`` pauses on three calls: a refund (expiring in an hour), a shipment that
    waits for an external result, and a deletion that expired; ``run-2`` on one."""

    def call(run: str, call_id: str, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        return NewApproval(
            run, call_id, tool, json.dumps(arguments), args_sha256(arguments), 3000, **kw
        )

    async def main() -> None:
        store = zincir.open_store(db)
        now = datetime.now(UTC)
        try:
            first = await store.create_run(
                "run-1", name="support", owner="agent", ttl=timedelta(seconds=60)
            )
            await store.open_approvals(
                first,
                [
                    call(
                        "run-1",
                        "refund",
                        "refund",
                        REFUND,
                        execution="approval",
                        expires_at=now + timedelta(hours=1),
                    ),
                    call("run-1", "ship", "ship", SHIPPING, execution="external"),
                    call(
                        "run-1",
                        "delete",
                        "delete",
                        SHIPPING,
                        execution="approval",
                        expires_at=now - timedelta(seconds=1),
                    ),
                ],
            )
            second = await store.create_run(
                "run-2", name="support", owner="agent", ttl=timedelta(seconds=60)
            )
            await store.open_approvals(
                second, [call("run-2", "refund", "refund", SHIPPING, execution="approval")]
            )
        finally:
            await store.close()

    asyncio.run(main())


def test_list_then_decide_each_kind_once(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    paused(db)

    listed = zincir_cli("approvals", "list", "--db", str(db), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, *lines = listed.stdout.splitlines()
    assert header.split() == [
        *("approval", "id", "run", "tool", "args", "sha256", "since", "expires", "arguments")
    ]
    by_id = {line.split()[0]: line.split() for line in lines}
    assert set(by_id) == {"run-1/refund", "run-1/ship", "run-1/delete", "run-2/refund"}
    assert by_id["run-1/refund"][1:4] == ["run-1", "refund", args_sha256(REFUND)[:12]]
    expires, shown = header.index("expires"), header.index("arguments")
    by_line = {line.split()[0]: line for line in lines}
    assert by_line["run-1/delete"][expires:shown].strip() == "EXPIRED"
    assert by_line["run-1/ship"][expires:shown].strip() == "never"
    assert by_line["run-1/refund"][shown:] == json.dumps(REFUND)  # what would run

    as_json = zincir_cli(
        "approvals", "list", "--run", "run-1", "--json", "--db", str(db), cwd=tmp_path
    )
    assert as_json.returncode == 0, as_json.stderr
    items = {item["call_id"]: item for item in json.loads(as_json.stdout)}
    assert set(items) == {"refund", "ship", "delete"}
    assert items["refund"]["arguments"] == REFUND
    assert items["ship"]["execution"] == "external" and items["delete"]["expired"] is True
    digest = items["refund"]["args_sha256"]
    assert digest == args_sha256(REFUND)

    approved = zincir_cli(
        "approvals",
        "approve",
        "run-1/refund",
        "--args-sha256",
        digest,
        "--db",
        str(db),
        cwd=tmp_path,
    )
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("approved run-1/refund") and "run-1" in approved.stdout

    answered = zincir_cli(
        "approvals", "result", "run-1/ship", '{"tracking": "Z1"}', "--db", str(db), cwd=tmp_path
    )
    assert answered.returncode == 0, answered.stderr
    denied = zincir_cli(
        "approvals", "deny", "run-2/refund", "--reason", "too much", "--db", str(db), cwd=tmp_path
    )
    assert denied.returncode == 0, denied.stderr

    decisions = dict(rows(db, "SELECT approval_id, decision FROM approvals"))
    assert json.loads(decisions["run-1/refund"])["decision"] == "approve"
    assert json.loads(decisions["run-1/ship"])["result"] == {"tracking": "Z1"}
    assert json.loads(decisions["run-2/refund"])["reason"] == "too much"
    assert decisions["run-1/delete"] is None
    assert rows(db, "SELECT to_run_id, topic FROM messages ORDER BY id") == [
        ("run-1", "zincir.approval"),
        ("run-1", "zincir.approval"),
        ("run-2", "zincir.approval"),
    ]

    again = zincir_cli("approvals", "deny", "run-1/refund", "--db", str(db), cwd=tmp_path)
    one_line_error(again, "[run run-1]", "already decided")
    expired = zincir_cli("approvals", "approve", "run-1/delete", "--db", str(db), cwd=tmp_path)
    one_line_error(expired, "[run run-1]", "expired")

    left = zincir_cli("approvals", "list", "--db", str(db), cwd=tmp_path)
    assert [line.split()[0] for line in left.stdout.splitlines()[1:]] == ["run-1/delete"]


def test_wrong_digest_wrong_kind_and_bad_input_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    paused(db)
    wrong = zincir_cli(
        "approvals",
        "approve",
        "run-1/refund",
        "--args-sha256",
        args_sha256(SHIPPING),
        "--db",
        str(db),
        cwd=tmp_path,
    )
    one_line_error(wrong, "[run run-1]", "binds arguments")
    one_line_error(
        zincir_cli("approvals", "approve", "run-1/ship", "--db", str(db), cwd=tmp_path),
        "[run run-1]",
        "external result",
    )
    one_line_error(
        zincir_cli("approvals", "result", "run-1/refund", '"done"', "--db", str(db), cwd=tmp_path),
        "[run run-1]",
        "waits for approval",
    )
    one_line_error(
        zincir_cli("approvals", "result", "run-1/ship", "done", "--db", str(db), cwd=tmp_path),
        "JSON_VALUE is not JSON",
    )
    one_line_error(
        zincir_cli(
            "approvals",
            "approve",
            "run-1/refund",
            "--override",
            "[1]",
            "--db",
            str(db),
            cwd=tmp_path,
        ),
        "--override must be a JSON object",
    )
    one_line_error(
        zincir_cli("approvals", "deny", "run-1/nope", "--db", str(db), cwd=tmp_path),
        "[run run-1]",
        "no approval 'run-1/nope'",
    )
    assert rows(db, "SELECT COUNT(*) FROM approvals WHERE decision IS NOT NULL") == [(0,)]
    assert rows(db, "SELECT COUNT(*) FROM messages") == [(0,)]

    missing = tmp_path / "absent.db"
    one_line_error(
        zincir_cli("approvals", "list", "--db", str(missing), cwd=tmp_path), "no database"
    )
    assert not missing.exists()


def test_decide_by_the_digest_prefix_the_list_prints(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    paused(db)
    listed = zincir_cli("approvals", "list", "--run", "run-1", "--db", str(db), cwd=tmp_path)
    printed = {line.split()[0]: line.split()[3] for line in listed.stdout.splitlines()[1:]}
    refund, shipping = printed["run-1/refund"], printed["run-1/ship"]
    assert len(refund) == 12 and args_sha256(REFUND).startswith(refund)

    def decide(*args: str) -> subprocess.CompletedProcess[str]:
        return zincir_cli("approvals", *args, "--db", str(db), cwd=tmp_path)

    one_line_error(decide("approve", refund[:11]), "too short", "at least 12 hex digits")
    one_line_error(
        decide("approve", "run-1/refund", "--args-sha256", refund[:8]), "too short", "12 hex"
    )
    one_line_error(decide("approve", "run-1/refund", "--args-sha256", "xyz"), "hex")
    one_line_error(
        decide("deny", shipping),
        "matches 3 waiting approvals (run-1/delete, run-1/ship, run-2/refund)",
        "pass the approval id",
    )
    one_line_error(decide("deny", "0" * 12), "no waiting approval", "approvals list")
    one_line_error(
        decide("approve", "run-1/refund", "--args-sha256", shipping), "[run run-1]", "binds"
    )
    assert rows(db, "SELECT COUNT(*) FROM approvals WHERE decision IS NOT NULL") == [(0,)]

    approved = decide("approve", refund.upper())
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("approved run-1/refund")
    answered = decide("result", "run-1/ship", '"sent"', "--args-sha256", shipping)
    assert answered.returncode == 0, answered.stderr
    decisions = dict(rows(db, "SELECT approval_id, decision FROM approvals"))
    assert json.loads(decisions["run-1/refund"])["decision"] == "approve"
    assert json.loads(decisions["run-1/ship"])["result"] == "sent"


def test_the_list_shortens_long_arguments(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    long = {"note": "x" * 500, "line": "one\ntwo"}

    async def main() -> None:
        store = zincir.open_store(db)
        try:
            run = await store.create_run("run-1", name="s", owner="agent", ttl=timedelta(minutes=1))
            await store.open_approvals(
                run,
                [
                    NewApproval(
                        "run-1", "c", "note", json.dumps(long), args_sha256(long), 3000, "approval"
                    )
                ],
            )
        finally:
            await store.close()

    asyncio.run(main())
    listed = zincir_cli("approvals", "list", "--db", str(db), cwd=tmp_path)
    header, line = listed.stdout.splitlines()
    shown = line[header.index("arguments") :]
    assert shown.startswith('{"note": "xxx') and shown.endswith("…") and len(shown) == 48
