"""The reference durable agent: a tiny custom loop on AgentContext (``zincir demo``).

It records a synthetic model response asking for ``write_file``, publishes
``$ZINCIR_OUTPUT_DIR/call_1.json`` atomically (keyed by the tool call id, so a repeat is a
no-op), records the result, verifies a checkpoint against the file and completes the run.
With ``ZINCIR_RESUME=1`` it force-recovers every pending or running run and finishes each
from its log instead of creating one. The ``ZINCIR_PAUSE_*_MS`` variables hold the process
at the crash boundaries the tests kill it at; the lease heartbeat keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from .runs import AgentContext, CheckpointCandidate, DurableState, ToolCall, Verification
from .store import Store, open_store
from .store.report import format_run

__all__ = ["main", "publish_atomically", "run_demo"]

MODEL_TEXT = "I will write the report with write_file."
TOOL_CALL = ToolCall(
    "call_1",
    "write_file",
    {
        "path": "call_1.json",
        "content": {"report": "zincir demo", "status": "ok", "items": [1, 2, 3]},
    },
)
LEASE_TTL = timedelta(seconds=2)


def publish_atomically(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``directory/name`` by temp file, fsync and rename (all or nothing)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    handle, temp_name = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    folder = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return target


def _file_bytes(arguments: dict[str, Any]) -> bytes:
    return json.dumps(arguments["content"], sort_keys=True, indent=2).encode() + b"\n"


def write_file(output_dir: Path, call: ToolCall) -> dict[str, Any]:
    """The demo's idempotent tool: the output file is named after the tool call id."""
    data = _file_bytes(call.arguments)
    target = output_dir / f"{call.id}.json"
    if not (target.exists() and target.read_bytes() == data):
        publish_atomically(output_dir, target.name, data)
    return {"path": str(target), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


async def _pause(variable: str, out: TextIO) -> None:
    milliseconds = int(os.environ.get(variable, "0") or 0)
    if milliseconds > 0:
        print(f"[demo] pause {variable}={milliseconds}", file=out, flush=True)
        await asyncio.sleep(milliseconds / 1000)


def _candidate(output_dir: Path) -> CheckpointCandidate:
    data = _file_bytes(TOOL_CALL.arguments)
    return CheckpointCandidate(
        completed=["write call_1.json"],
        remaining=[],
        artifacts=[
            {"path": str(output_dir / "call_1.json"), "sha256": hashlib.sha256(data).hexdigest()}
        ],
        failed_attempts=[],
        evidence={"tool_call_id": TOOL_CALL.id},
    )


def _verifier(output_dir: Path) -> Any:
    async def verify(candidate: CheckpointCandidate) -> Verification:
        """Accept only if every artifact exists with the claimed digest."""
        checks = []
        for artifact in candidate.artifacts:
            path = Path(artifact["path"])
            actual = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
            checks.append({"path": str(path), "expected": artifact["sha256"], "actual": actual})
        passed = bool(checks) and all(c["expected"] == c["actual"] for c in checks)
        return Verification(passed, {"artifacts": checks})

    return verify


async def drive(ctx: AgentContext, output_dir: Path, out: TextIO) -> None:
    """Advance a run to completion from whatever its log already holds."""
    state: DurableState = await ctx.state()
    if state.checkpoint is None and not await ctx.pending_checkpoint():
        events = await ctx.store.list_events(ctx.run_id)
        if not any(event.type == "llm_call" for event in events):
            await ctx.record_response(
                MODEL_TEXT, [TOOL_CALL], "tool_use", usage={"input_tokens": 42, "output_tokens": 17}
            )
        for call in await ctx.pending_tools():
            await _pause("ZINCIR_PAUSE_BEFORE_TOOL_MS", out)
            result = write_file(output_dir, call)
            await _pause("ZINCIR_PAUSE_AFTER_TOOL_MS", out)
            await ctx.record_tool_result(call.id, result)
    verify = _verifier(output_dir)
    await ctx.resume_checkpoint(verify)
    if (await ctx.state()).checkpoint is None:
        outcome = await ctx.checkpoint(_candidate(output_dir), verify)
        if not outcome.accepted:
            await ctx.fail("the verifier rejected the checkpoint")
            return
    accepted = (await ctx.state()).checkpoint
    await _pause("ZINCIR_PAUSE_AFTER_CHECKPOINT_MS", out)
    if accepted is not None and not accepted.remaining:
        await ctx.complete({"artifact": str(output_dir / "call_1.json")})


async def run_demo(
    database: str | None = None,
    *,
    resume: bool | None = None,
    output_dir: str | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Run (or resume) the reference agent; returns the process exit code."""
    resume = os.environ.get("ZINCIR_RESUME") == "1" if resume is None else resume
    folder = Path(output_dir or os.environ.get("ZINCIR_OUTPUT_DIR") or "output").absolute()
    store = open_store(database)
    try:
        if resume:
            return await _resume_all(store, folder, out)
        ctx = await AgentContext.create(
            store,
            name="durable-demo",
            provider="synthetic",
            config={"goal": "publish call_1.json and verify it", "output_dir": str(folder)},
            lease_ttl=LEASE_TTL,
        )
        print(f"[demo] created run {ctx.run_id} in {store.path}", file=out, flush=True)
        await _finish_and_show(ctx, folder, out)
        return 0
    finally:
        await store.close()


async def _finish_and_show(ctx: AgentContext, folder: Path, out: TextIO) -> None:
    """Drive the run to its end, release it, and print it with its event log."""
    try:
        await drive(ctx, folder, out)
    finally:
        await ctx.close()
    print(await format_run(ctx.store, ctx.run_id), file=out)


async def _resume_all(store: Store, folder: Path, out: TextIO) -> int:
    runs = [
        run
        for status in ("pending", "running")
        for run in await store.list_runs(limit=1_000_000, status=status)
    ]
    if not runs:
        print("[demo] nothing to resume", file=out)
        return 0
    for run in runs:
        ctx = await AgentContext.force_recover(store, run["id"], lease_ttl=LEASE_TTL)
        print(
            f"[demo] resuming run {ctx.run_id} (lease token {ctx.lease_token})",
            file=out,
            flush=True,
        )
        await _finish_and_show(ctx, folder, out)
    return 0


def main() -> None:
    """Entry point of ``examples/durable_agent.py``."""
    raise SystemExit(asyncio.run(run_demo()))
