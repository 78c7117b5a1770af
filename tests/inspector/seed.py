"""Seed inspector test databases through zincir's real APIs only (never hand-written rows).

``seed_agent_runs`` uses AgentContext. ``seed_workflow`` and ``seed_operations`` use the
workflow module and LocalRuntime when they are importable and return None otherwise, so the
tests that need them skip with a reason instead of faking rows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from zincir import AgentContext, CheckpointCandidate, SQLiteStore, Verification

# Stored agent text that must never execute in the inspector.
XSS_SCRIPT = "<script>document.title='pwned'</script>"
XSS_CLOSE = "</script><script>alert(1)</script>"
XSS_URL = "javascript:alert(1)"
XSS_IMG = "<img src=x onerror=\"document.title='pwned'\">"
XSS_PAYLOADS = (XSS_SCRIPT, XSS_CLOSE, XSS_URL, XSS_IMG)
XSS_RUN_ID = "<script>document.title='pwned'</script>/x?y#z"


@dataclass
class Seeded:
    """Run ids of the seeded scenario, by role."""

    completed: str = ""
    in_doubt: str = ""
    failed: str = ""
    parent: str = ""
    child: str = ""
    xss: str = ""
    all: list[str] = field(default_factory=list)


async def accept(candidate: CheckpointCandidate) -> Verification:
    return Verification(True, {"checked": list(candidate.completed), "tests": "12 passed"})


async def reject(candidate: CheckpointCandidate) -> Verification:
    return Verification(False, {"reason": "artifact missing", "xss": XSS_SCRIPT})


async def seed_agent_runs(store: SQLiteStore, *, keep_lease: bool = True) -> Seeded:
    """A completed run, a run with an intent in doubt, a failed run, parent/child and an XSS run.

    With ``keep_lease`` the in-doubt run keeps a live one-hour lease (its heartbeat, every 20
    min, never fires during a test and ends with the event loop); without, it is released so
    nothing writes once seeding returns.
    """
    seeded = Seeded()

    done = await AgentContext.create(
        store,
        name="research-agent",
        provider="anthropic",
        config={"goal": "Compare the proposals", "model": "claude", "max_rounds": 4},
    )
    await done.record_response(
        "I will write the summary file.",
        [
            {
                "id": "call_1",
                "name": "write_file",
                "arguments": {"path": "output/call_1.json", "text": "summary"},
            }
        ],
        "tool_use",
        usage={"input_tokens": 1200, "output_tokens": 300},
    )
    await done.record_tool_result("call_1", {"written": "output/call_1.json", "bytes": 7})
    await done.record_response(
        "Done.", [], "end_turn", usage={"input_tokens": 1500, "output_tokens": 80}
    )
    await done.checkpoint(
        {
            "completed": ["write summary"],
            "remaining": [],
            "artifacts": ["output/call_1.json"],
            "failed_attempts": [],
            "evidence": {"file": "output/call_1.json"},
        },
        accept,
    )
    await done.complete({"summary": "output/call_1.json"})
    seeded.completed = done.run_id

    doubt = await AgentContext.create(
        store,
        name="support-agent",
        provider="openai",
        config={"ticket": 4312},
        lease_ttl=timedelta(hours=1),
    )
    await doubt.record_response(
        "Refunding and emailing the customer.",
        [
            {"id": "refund-77", "name": "issue_refund", "arguments": {"order": "A-19", "eur": 42}},
            {"id": "mail-77", "name": "send_email", "arguments": {"to": "c@example.com"}},
        ],
        "tool_use",
        usage={"input_tokens": 900, "output_tokens": 120},
    )
    await doubt.record_tool_result("refund-77", {"refund_id": "R-1"})
    await doubt.checkpoint(
        {
            "completed": ["refund"],
            "remaining": ["email"],
            "artifacts": [],
            "failed_attempts": ["first email bounced"],
            "evidence": {},
        },
        reject,
    )
    seeded.in_doubt = doubt.run_id
    if not keep_lease:
        await doubt.close()

    failed = await AgentContext.create(store, name="crawler", provider="local", config={})
    await failed.record_response("fetching", [], "end_turn")
    await failed.fail("RateLimited: provider returned 429 three times")
    seeded.failed = failed.run_id

    parent = await AgentContext.create(store, name="orchestrator", config={"fan_out": 1})
    child = await AgentContext.create(
        store, name="worker-1", config={"part": 1}, parent_id=parent.run_id
    )
    await child.complete()
    await parent.close()
    seeded.parent, seeded.child = parent.run_id, child.run_id

    xss = await AgentContext.create(
        store,
        name=XSS_SCRIPT,
        provider=XSS_CLOSE,
        run_id=XSS_RUN_ID,
        config={"homepage": XSS_URL, "note": XSS_SCRIPT, "close": XSS_CLOSE, "img": XSS_IMG},
    )
    await xss.record_response(
        XSS_SCRIPT + XSS_CLOSE,
        [
            {
                "id": XSS_IMG,
                "name": XSS_SCRIPT,
                "arguments": {"url": XSS_URL, "html": XSS_CLOSE, "img": XSS_IMG},
            }
        ],
        XSS_URL,
    )
    await xss.record_tool_result(XSS_IMG, {"html": XSS_SCRIPT, "link": XSS_URL}, is_error=True)
    await xss.record_response(
        XSS_CLOSE, [{"id": XSS_URL, "name": XSS_URL, "arguments": {"a": XSS_SCRIPT}}], None
    )
    await xss.checkpoint(
        {
            "completed": [XSS_SCRIPT],
            "remaining": [XSS_URL],
            "artifacts": [XSS_CLOSE],
            "failed_attempts": [XSS_IMG],
            "evidence": {"link": XSS_URL},
        },
        reject,
    )
    await xss.fail(XSS_SCRIPT + XSS_URL)
    seeded.xss = xss.run_id

    seeded.all = [
        seeded.completed,
        seeded.in_doubt,
        seeded.failed,
        seeded.parent,
        seeded.child,
        seeded.xss,
    ]
    return seeded


async def seed_big_run(store: SQLiteStore, events: int, *, concurrency: int = 256) -> str:
    """One completed run with ``events`` events (llm_call with usage), via record_response."""
    ctx = await AgentContext.create(
        store, name="long-horizon", provider="bench", config={"events": events}
    )
    responses = events - 2  # the opening and closing state_transition events
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            await ctx.record_response(
                f"step {index}", [], "end_turn", usage={"input_tokens": 10, "output_tokens": 3}
            )

    await asyncio.gather(*(one(i) for i in range(responses)))
    await ctx.complete()
    return ctx.run_id


WORKFLOW_RUN = "report-workflow-1"
OPERATIONS_RUN = "durable-agent-1"


async def seed_workflow(store: SQLiteStore) -> str | None:
    """Steps, timers (one done, one waiting), messages and a child run via WorkflowContext.

    Returns None when zincir.workflow is not importable.
    """
    try:
        from zincir.workflow import WorkflowContext, WorkflowSuspended, send_message
    except ImportError:
        return None
    wf: Any = await WorkflowContext.open(
        store, WORKFLOW_RUN, name="report-workflow", config={"report": "weekly", "note": XSS_SCRIPT}
    )
    try:
        await wf.step("fetch-data", lambda: {"rows": 3, "note": XSS_SCRIPT})
        await wf.step("generate-report", lambda: "report.md")
        await wf.sleep("cool-down", timedelta(milliseconds=5))
        await wf.send(WORKFLOW_RUN, "self-note", {"text": XSS_CLOSE})
        await wf.recv("self-note", timedelta(seconds=5))
        child = await wf.spawn("summarise", {"part": 1}, run_name="summariser")
        await wf.send(child, "instructions", {"style": "short"})
    finally:
        await wf.close()
    await send_message(store, WORKFLOW_RUN, "approval", {"approved": True, "by": XSS_IMG})
    waiting: Any = await WorkflowContext.open(store, WORKFLOW_RUN, suspend_waits=True)
    try:
        await waiting.sleep("nightly-retry", timedelta(hours=6))
    except WorkflowSuspended:
        pass  # the run now waits on its timer, with no process driving it
    finally:
        await waiting.close()
    return WORKFLOW_RUN


async def seed_operations(store: SQLiteStore) -> str | None:
    """Success, failure and suspended records through LocalRuntime.

    Returns None when zincir.durable has no LocalRuntime yet.
    """
    try:
        from zincir.contract import Invocation, OperationKind
        from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy
    except ImportError:
        return None
    from zincir import OperationFailed, Suspend

    ctx = await AgentContext.create(
        store, name="durable-agent", run_id=OPERATIONS_RUN, config={"handlers": ["support-tools"]}
    )
    await ctx.close()
    registry: Any = HandlerRegistry()

    async def tool(invocation: Any, request: Any) -> Any:
        if request.get("fail"):
            raise OperationFailed("RateLimited", False, "slow down " + XSS_SCRIPT)
        if request.get("ask"):
            raise Suspend("approval", {"question": request["ask"]})
        return {"ok": True, "echo": request}

    registry.register(OperationKind.TOOL_CALL, "support-tools", tool)
    runtime: Any = LocalRuntime(store, registry, RetryPolicy.no_retry())
    bodies = ['{"q":"order A-19"}', '{"fail":true}', '{"ask":"refund 42 EUR?"}']
    for sequence, body in enumerate(bodies):
        await runtime.execute(
            Invocation(
                run_id=OPERATIONS_RUN,
                step_id="tool.call",
                sequence=sequence,
                kind=OperationKind.TOOL_CALL,
                handler_id="support-tools",
                input_json=body,
            )
        )
    return OPERATIONS_RUN


DUE_TIMER_RUN = "waiting-workflow-1"


async def seed_due_timer(store: SQLiteStore) -> str | None:
    """A run suspended on a timer whose wake time has passed (seed with a clock an hour behind).

    Returns None when zincir.workflow is not importable.
    """
    try:
        from zincir.workflow import WorkflowContext, WorkflowSuspended
    except ImportError:
        return None
    wf: Any = await WorkflowContext.open(
        store, DUE_TIMER_RUN, name="nightly-digest", suspend_waits=True
    )
    try:
        await wf.sleep("backoff", timedelta(minutes=30))
    except WorkflowSuspended:
        pass
    finally:
        await wf.close()
    return DUE_TIMER_RUN
