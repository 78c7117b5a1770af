"""Provider rate limits shared through the store (``zincir.RateLimit``): processes sharing a
key stay within it together, a 429's ``Retry-After`` pauses them all, token usage counts
from responses, and a waiting run says why in ``zincir runs list --stuck``.

Three processes share the limit for ``SECONDS`` (30 s) per backend, long enough for the
bound to bind well past the bucket's burst (``$ZINCIR_TEST_RATE_LIMIT_SECONDS`` shortens it
in an edit loop)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.openai_server import ChatServer, Reply, chunk, completion, error, usage
from tests.agent.reference import call
from zincir.agent import Agent, Approve, FunctionModel, OpenAIChatModel, Runner, tool
from zincir.agent._rate_limit import estimate_tokens
from zincir.payloads import ModelRequest, ModelResponse, TextPart, Usage

WORKER = Path(__file__).with_name("rate_limit_worker.py")
REPO = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("ZINCIR_TEST_RATE_LIMIT_SECONDS", "30"))
KEY = "shared-key"


@contextmanager
def workers(
    target: str, server: ChatServer, seconds: float, rpm: str, tpm: str = "-", count: int = 3
) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` worker processes, each ready (its Runner open) when the block starts;
    SIGKILLed if still running when it ends."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), target, server.base_url, str(seconds), rpm, tpm, f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "ready\n", proc.stderr.read() if proc.stderr else line
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def finish(procs: list[subprocess.Popen[str]], timeout: float) -> int:
    """The runs the workers finished together, once each exited cleanly."""
    total = 0
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        total += int(out.split()[-1])
    return total


def within(times: list[float], per_second: float, burst: float, slack: int = 1) -> None:
    """Every window between two arrivals holds at most the bucket's burst plus what the
    rate refilled over it (``slack``: requests whose network delays differ)."""
    times = sorted(times)
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            allowed = burst + per_second * (times[j] - start) + slack
            assert j - i + 1 <= allowed, (j - i + 1, times[j] - start)


def test_rate_limit_is_validated() -> None:
    limit = zincir.RateLimit("openai-main", requests_per_minute=120)
    assert limit.tokens_per_minute is None and limit == zincir.RateLimit("openai-main", 120)
    for bad in (
        lambda: zincir.RateLimit("k"),
        lambda: zincir.RateLimit("k", requests_per_minute=0),
        lambda: zincir.RateLimit("k", tokens_per_minute=-5),
        lambda: zincir.RateLimit("k", requests_per_minute=True),
        lambda: zincir.RateLimit("k", requests_per_minute=float("inf")),
        lambda: zincir.RateLimit("", requests_per_minute=1),
    ):
        with pytest.raises(zincir.InvalidInput):
            bad()
    with pytest.raises(zincir.InvalidInput, match="rate_limit"):
        OpenAIChatModel("gpt-test", rate_limit="60/min")  # type: ignore[arg-type]


def test_the_estimate_counts_size_and_output_bound() -> None:
    request = ModelRequest.from_dict({"messages": [], "settings": {"max_tokens": 50}})
    assert estimate_tokens("x" * 400, request) == 150


def test_three_processes_share_requests_per_minute(store_target: str, server: ChatServer) -> None:
    server.fallback = Reply(body=completion("ok"))
    with workers(store_target, server, SECONDS, "120") as procs:
        total = finish(procs, SECONDS + 60)
    times = [received.at for received in server.received]
    assert len(times) == total
    within(times, per_second=2.0, burst=2.0)
    span = max(times) - min(times)
    assert span > SECONDS * 0.8
    # Together they reach the limit: about every slot the rate gives is used.
    assert total >= 0.85 * (2.0 * span), (total, span)


def test_a_429_pauses_every_process(store_target: str, server: ChatServer) -> None:
    server.fallback = Reply(body=completion("ok"))
    with workers(store_target, server, 7.0, "600") as procs:
        time.sleep(2.0)
        server.script(error(429, "slow down", headers={"Retry-After": "2"}))
        total = finish(procs, 60)
    limited = [r.at for r in server.received if r.status == 429]
    assert len(limited) == 1
    blocked = limited[0]
    others = [r.at - blocked for r in server.received if r.status == 200]
    # Requests already on their way may still arrive; none is sent while the key is blocked.
    assert not [t for t in others if 0.3 < t < 1.9], sorted(t for t in others if -1 < t < 3)
    assert [t for t in others if 1.9 <= t < 3.0], "the processes went on after the block"
    # The block emptied the buckets: they resume at the limit's pace (10 a second), not in
    # a burst of its reserved slots.
    assert len([t for t in others if 1.9 <= t < 2.5]) <= 8
    assert total == len(others)  # the 429's run was retried after it


async def test_tokens_per_minute_count_the_responses_usage(
    store_target: str, server: ChatServer
) -> None:
    # 6000 tokens a minute: 100 a second; each answer used 300 (far above its estimate).
    server.fallback = Reply(body=completion("ok", usage_=usage(290, 10)))
    limit = zincir.RateLimit(KEY, tokens_per_minute=6000)
    agent = Agent(OpenAIChatModel("gpt-test", server.client(), rate_limit=limit), name="tpm")
    async with Runner(store_target, [agent]) as runner:
        for number in range(3):
            await runner.run(agent, f"q{number}", run_id=f"tpm-{number}")
    times = [received.at for received in server.received]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # The first request took its estimate (under 100 tokens); its usage pushed the bucket
    # out by 300 tokens, so the next waited about 3 s, not the estimate's fraction of one.
    assert all(gap > 2.0 for gap in gaps), gaps
    assert all(gap < 4.0 for gap in gaps), gaps


async def test_a_waiting_run_says_why(store_target: str, server: ChatServer) -> None:
    server.fallback = Reply(body=completion("ok"))
    limit = zincir.RateLimit(KEY, requests_per_minute=1)
    agent = Agent(OpenAIChatModel("gpt-test", server.client(), rate_limit=limit), name="slow")
    async with Runner(store_target, [agent]) as runner:
        await runner.run(agent, "first", run_id="first")
        waiting = asyncio.ensure_future(runner.run(agent, "second", run_id="second"))
        try:
            for _ in range(200):
                run = await runner.store.get_run("second")
                if run is not None and run["wait_kind"] is not None:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the second run recorded no wait")
            assert run["wait_ref"] == f"rate_limit:{KEY}"
            listed = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "zincir", "runs", "list", "--stuck", "--stuck-for", "0s"]
                + ["--db", store_target],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO / "src")},
            )
            assert listed.returncode == 0, listed.stderr
            line = next(line for line in listed.stdout.splitlines() if line.startswith("second"))
            assert f"waiting for rate limit {KEY} until {run['wait_until']}" in line
            assert len(server.received) == 1  # the second request waits its slot
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)


async def test_a_plain_model_never_asks_the_store(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text="ok")], usage=Usage())

    agent = Agent(FunctionModel(answer), name="plain")
    async with Runner(store_target, [agent]) as runner:

        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a model without a rate limit took capacity")

        monkeypatch.setattr(type(runner.store), "take_rate_limit", refuse)
        result = await runner.run(agent, "hello", run_id="plain")
    assert result.output == "ok"


@tool(requires_approval=True)
async def refund(order_id: str) -> str:
    """Refund an order (a person approves it first)."""
    return f"refunded {order_id}"


async def test_replayed_requests_take_no_capacity(
    store_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def answer(request: ModelRequest) -> ModelResponse:
        asked.append(len(request.messages))
        if len(asked) == 1:
            return ModelResponse(parts=[call("call-refund", "refund", order_id="A-17")])
        return ModelResponse(parts=[TextPart(text="done")])

    model = FunctionModel(answer)
    model.rate_limit = zincir.RateLimit(KEY, requests_per_minute=6000)  # any Model may set one
    agent = Agent(model, name="refunds", tools=[refund])
    async with Runner(store_target, [agent]) as runner:
        takes: list[str] = []
        take = type(runner.store).take_rate_limit

        async def counted(self: Any, key: str, *args: Any, **kwargs: Any) -> float:
            if not kwargs.get("again"):
                takes.append(key)
            return await take(self, key, *args, **kwargs)

        monkeypatch.setattr(type(runner.store), "take_rate_limit", counted)
        paused = await runner.run(agent, "Refund A-17.", run_id="refund")
        assert paused.paused is not None and takes == [KEY]
        done = await runner.resume("refund", {"call-refund": Approve()})
    assert done.output == "done"
    # The resume replayed the first request from its record: only the second took a slot.
    assert len(asked) == 2 and takes == [KEY, KEY]


async def test_streamed_requests_wait_too(store_target: str, server: ChatServer) -> None:
    server.fallback = Reply(
        chunks=[
            chunk({"role": "assistant", "content": "ok"}),
            chunk(finish_reason="stop"),
            chunk(usage_=usage(10, 5)),
        ]
    )
    limit = zincir.RateLimit(KEY, requests_per_minute=60)  # one a second, no burst
    agent = Agent(OpenAIChatModel("gpt-test", server.client(), rate_limit=limit), name="live")
    async with Runner(store_target, [agent]) as runner:
        for number in range(3):
            stream = runner.run_stream(agent, f"q{number}", run_id=f"live-{number}")
            assert [event async for event in stream] and stream.result.output == "ok"
    times = [received.at for received in server.received]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) == 3 and all(gap > 0.9 for gap in gaps), gaps
