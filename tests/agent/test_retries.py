"""Retries of a failed model request: deterministic full jitter through ``retry_delay``."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.helpers import select
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve
from zincir.agent._retry import jitter_fraction, retry_document
from zincir.payloads import ModelRequest, ModelResponse, RetryDelay, TextPart

HANDLERS = Handlers(model_request="m", retry_delay="timer")
POLICY = zincir.RetryPolicy(
    max_attempts=3, initial_interval=timedelta(milliseconds=20), max_interval=timedelta(seconds=1)
)


class Scripted:
    """A model that fails with RateLimited ``failures`` times, then answers."""

    def __init__(self, failures: int, *, retry_after: str = "") -> None:
        self.failures = failures
        self.calls = 0
        self.retry_after = retry_after
        self.hang = asyncio.Event()
        self.hang_at: int | None = None

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == self.hang_at:
            self.hang.set()
            await asyncio.sleep(3600)
        if self.calls <= self.failures:
            raise zincir.OperationFailed("RateLimited", True, f"slow down{self.retry_after}")
        return ModelResponse(parts=[TextPart(text="answer")])


def bind(
    durable: Durable, agent: Agent, run_id: str = "r", timers: list[RetryDelay] | None = None
) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    if timers is not None:

        async def timer(invocation: zincir.Invocation, request: Any) -> Any:
            timers.append(RetryDelay.from_dict(request))
            return {"slept_seconds": 0}

        registry = zincir.HandlerRegistry()
        serve(registry, agent, Handlers(model_request="m"))
        registry.register(zincir.OperationKind.RETRY_DELAY, "timer", timer)
    runtime = zincir.LocalRuntime(durable.store, registry, zincir.RetryPolicy.no_retry())
    return DurableBinding(runtime, run_id, HANDLERS)


def operations(db: str, run_id: str = "r") -> list[tuple[str, int, str]]:
    return [
        (step, seq, outcome)
        for step, seq, outcome in select(
            db,
            "SELECT step_id, sequence, outcome FROM operations WHERE run_id = ? ORDER BY 2, 1",
            (run_id,),
        )
    ]


def test_the_jitter_is_a_pure_function_of_run_retry_and_request() -> None:
    assert jitter_fraction("r", 1, 0) == jitter_fraction("r", 1, 0)
    assert (
        len(
            {
                jitter_fraction("r", 1, 0),
                jitter_fraction("r", 2, 0),
                jitter_fraction("r", 1, 1),
                jitter_fraction("s", 1, 0),
            }
        )
        == 4
    )
    assert all(0 <= jitter_fraction(str(i), 1, 0) < 1 for i in range(100))
    error = zincir.OperationFailed("RateLimited", True, "x (Retry-After: 2.5 s)")
    document = retry_document(
        POLICY, run_id="r", retry=1, failed_request=0, error=error, cumulative_before=0
    )
    assert document.delay_seconds == 2.5 and document.retry_after_seconds == 2.5


async def test_an_error_that_clears_on_the_second_attempt_completes_the_run(
    durable: Durable,
) -> None:
    model = Scripted(failures=1)
    agent = Agent(FunctionModel(model), retry=POLICY)
    timers: list[RetryDelay] = []
    result = await agent.run("go", durable=bind(durable, agent, timers=timers))
    assert result.output == "answer" and model.calls == 2
    assert operations(durable.target) == [
        ("model.request", 0, "failure"),
        ("retry.delay", 1, "success"),
        ("model.request", 10**12, "success"),
    ]
    [timer] = timers
    assert (timer.retry, timer.failed_request, timer.error) == (1, 0, "RateLimited")
    assert 0 <= timer.delay_seconds < 0.02 and timer.retry_after_seconds is None
    assert timer.delay_seconds == round(jitter_fraction("r", 1, 0) * 0.02, 6)


async def test_retry_after_is_honoured_and_the_serve_timer_waits(durable: Durable) -> None:
    model = Scripted(failures=1, retry_after=" (Retry-After: 0.2 s)")
    agent = Agent(FunctionModel(model), retry=POLICY)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await agent.run("go", durable=bind(durable, agent))
    assert result.output == "answer" and loop.time() - started >= 0.2
    stored = select(
        durable.target, "SELECT input_json FROM operations WHERE step_id = 'retry.delay'"
    )
    timer = RetryDelay.from_json(stored[0][0])
    assert timer.retry_after_seconds == 0.2 and timer.delay_seconds == 0.2
    assert timer.provider_metadata == {"retry_after_seconds": 0.2}


async def test_the_provider_status_and_request_id_travel_with_the_retry(durable: Durable) -> None:
    failures = iter(
        [zincir.OperationFailed("RateLimited", True, "HTTP 429, request id req_7: slow down")]
    )

    async def model(request: ModelRequest) -> ModelResponse:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return ModelResponse(parts=[TextPart(text="answer")])

    agent = Agent(FunctionModel(model), retry=POLICY)
    timers: list[RetryDelay] = []
    result = await agent.run("go", durable=bind(durable, agent, timers=timers))
    assert result.output == "answer"
    assert timers[0].provider_metadata == {"http_status": 429, "request_id": "req_7"}


async def test_an_error_that_never_clears_fails_the_run_with_its_name(durable: Durable) -> None:
    model = Scripted(failures=100)
    agent = Agent(FunctionModel(model), retry=POLICY)
    timers: list[RetryDelay] = []
    with pytest.raises(zincir.OperationFailed) as caught:
        await agent.run("go", durable=bind(durable, agent, timers=timers))
    assert caught.value.error == "RateLimited" and caught.value.retryable
    assert model.calls == 3
    assert [(t.retry, t.failed_request) for t in timers] == [(1, 0), (2, 0)]
    assert timers[1].cumulative_delay_seconds == pytest.approx(
        timers[0].delay_seconds + timers[1].delay_seconds
    )
    assert [(s, n) for s, n, _ in operations(durable.target)] == [
        ("model.request", 0),
        ("retry.delay", 1),
        ("retry.delay", 2),
        ("model.request", 10**12),
        ("model.request", 2 * 10**12),
    ]
    run = await durable.store.get_run("r")
    assert run is not None and run["status"] == "failed"
    assert str(run["last_error"]).startswith("RateLimited: "), run["last_error"]


async def test_the_retry_delay_input_is_identical_after_a_replay(durable: Durable) -> None:
    first_model = Scripted(failures=1)
    first_model.hang_at = 2  # killed inside the retried request
    first = Agent(FunctionModel(first_model), retry=POLICY)
    timers: list[RetryDelay] = []
    task = asyncio.create_task(first.run("go", durable=bind(durable, first, timers=timers)))
    await asyncio.wait_for(first_model.hang.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = select(
        durable.target, "SELECT input_json FROM operations WHERE step_id = 'retry.delay'"
    )
    assert len(stored) == 1 and len(timers) == 1

    again_model = Scripted(failures=0)
    again = Agent(FunctionModel(again_model), retry=POLICY)
    result = await again.run("go", durable=bind(durable, again, timers=timers))
    assert result.output == "answer"
    assert again_model.calls == 1  # only the retried request; #0 and its timer replayed
    assert len(timers) == 1
    replayed = retry_document(
        POLICY,
        run_id="r",
        retry=1,
        failed_request=0,
        error=zincir.OperationFailed("RateLimited", True, "slow down"),
        cumulative_before=0,
    )
    assert replayed.to_json() == stored[0][0]
    assert json.loads(stored[0][0])["error"] == "RateLimited"


async def test_a_non_retryable_failure_is_not_retried(durable: Durable) -> None:
    def model(request: ModelRequest) -> ModelResponse:
        raise zincir.OperationFailed("BadRequest", False)

    agent = Agent(FunctionModel(model), retry=POLICY)
    with pytest.raises(zincir.OperationFailed, match="BadRequest"):
        await agent.run("go", durable=bind(durable, agent))
    assert [s for s, _, _ in operations(durable.target)] == ["model.request"]


async def test_direct_retries_sleep_in_process() -> None:
    model = Scripted(failures=2)
    agent = Agent(FunctionModel(model), retry=POLICY)
    assert (await agent.run("go")).output == "answer" and model.calls == 3
    with pytest.raises(zincir.OperationFailed, match="RateLimited"):
        await Agent(FunctionModel(Scripted(failures=5)), retry=POLICY).run("go")


def test_max_attempts_is_bounded() -> None:
    with pytest.raises(zincir.InvalidInput, match="max_attempts"):
        Agent(FunctionModel(lambda r: None), retry=zincir.RetryPolicy(max_attempts=1001))
