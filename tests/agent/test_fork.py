"""Fork and rewind an agent run at a turn: the history is copied, the rest runs live."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import zincir
from tests.agent.fork_agents import HANG_ENV, LOG_ENV, PROMPT, counter, critic, toolless
from tests.agent.reference import lines
from tests.helpers import kill_at_line
from zincir.agent import DurableBinding, Runner
from zincir.cli import main
from zincir.contract import decode_record
from zincir.payloads import ModelRequest
from zincir.store import OperationKey, Store

AGENTS = Path(__file__).with_name("fork_agents.py")


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "calls.log"
    monkeypatch.setenv(LOG_ENV, str(path))
    monkeypatch.delenv(HANG_ENV, raising=False)
    yield path


def calls(log: Path) -> list[str]:
    """The model requests and tool runs logged since the last call, and forget them."""
    found = lines(log) if log.exists() else []
    log.unlink(missing_ok=True)
    return found


async def request_of(store: Store, run_id: str, number: int) -> ModelRequest:
    row = await store.get_operation(OperationKey(run_id, "model.request", number))
    assert row is not None and row.record is not None
    return ModelRequest.from_json(decode_record(row.record).invocation.input_json)


async def completed_source(runner: Runner, log: Path) -> str:
    result = await runner.run(counter, PROMPT)
    assert result.output == "model counted 5"
    assert calls(log) == [
        *(line for n in range(5) for line in (f"model {n}", f"tool {n}")),
        "model 5",
    ]
    return result.run_id or ""


async def test_a_fork_at_turn_3_calls_the_model_from_turn_3_only(store: Store, log: Path) -> None:
    runner = Runner(store, [counter])
    source = await completed_source(runner, log)
    before = await store.list_events(source)
    fork = await runner.fork(source, at_turn=3)
    assert fork != source and fork.startswith("counter-")
    result = await runner.resume(fork)
    assert result.output == "model counted 5"
    assert calls(log) == ["model 3", "tool 3", "model 4", "tool 4", "model 5"]
    # the conversation the fork's model saw up to turn 3 is the source's
    assert await request_of(store, fork, 3) == await request_of(store, source, 3)
    assert result.usage == (await runner.resume(source)).usage
    # the source is untouched, and resuming the finished fork calls nothing
    assert await store.list_events(source) == before
    assert (await store.get_run(source) or {})["status"] == "completed"
    assert (await runner.resume(fork)).output == "model counted 5"
    assert calls(log) == []
    origin = await store.run_origin(fork)
    assert origin is not None and origin.source_run_id == source


async def test_a_fork_continues_with_another_agent(store: Store, log: Path) -> None:
    runner = Runner(store, [counter, critic, toolless])
    source = await completed_source(runner, log)
    fork = await runner.fork(source, at_turn=3, run_id="critic-fork", agent="critic")
    assert fork == "critic-fork"
    result = await runner.resume(fork)
    assert result.output == "other counted 5"
    assert calls(log) == ["other 3", "tool 3", "other 4", "tool 4", "other 5"]
    mine, theirs = await request_of(store, fork, 3), await request_of(store, source, 3)
    assert mine.messages[0].parts[0].text == "Count, critically."  # type: ignore[union-attr]
    assert mine.messages[1:] == theirs.messages[1:]
    # an agent without the tools the history called is refused, naming them
    with pytest.raises(zincir.InvalidInput, match="step"):
        await runner.fork(source, at_turn=3, agent="toolless")
    # the prompt stays the run's: another is InputDrift
    binding = DurableBinding(runner.runtime, fork, Runner.handlers_for(critic), store=store)
    with pytest.raises(zincir.InputDrift):
        await critic.run("Count to six.", durable=binding)


async def test_two_forks_of_one_run_resume_in_parallel(store: Store, log: Path) -> None:
    runner = Runner(store, [counter])
    source = await completed_source(runner, log)
    early = await runner.fork(source, at_turn=1)
    late = await runner.fork(source, at_turn=4)
    other = Runner(store, [counter])
    binding = DurableBinding(other.runtime, late, Runner.handlers_for(counter), store=store)
    one, two = await asyncio.gather(runner.resume(early), counter.run(PROMPT, durable=binding))
    assert one.output == two.output == "model counted 5"
    made = calls(log)
    assert sorted(made) == sorted(
        ["model 1", "tool 1", "model 2", "tool 2", "model 3", "tool 3"]
        + ["model 4", "tool 4", "model 5"] * 2
    )


async def test_at_turn_out_of_range_and_unknown_runs(store: Store, log: Path) -> None:
    runner = Runner(store, [counter])
    source = await completed_source(runner, log)
    for wrong in (-1, 7):
        with pytest.raises(zincir.InvalidInput, match=r"from 0 to 6") as caught:
            await runner.fork(source, at_turn=wrong)
        assert caught.value.run_id == source
    with pytest.raises(zincir.RunNotFound):
        await runner.fork("nope", at_turn=1)
    whole = await runner.fork(source, at_turn=6)  # the whole log: it finishes as it did
    assert (await runner.resume(whole)).output == "model counted 5"
    assert calls(log) == []


async def test_rewind_cancels_the_source_and_the_fork_continues(store: Store, log: Path) -> None:
    runner = Runner(store, [counter])
    source = await runner.fork(await completed_source(runner, log), at_turn=4)  # unfinished
    fork = await runner.rewind(source, at_turn=2)
    row = await store.get_run(source)
    assert row is not None and row["status"] == "cancelled"
    events = await store.list_events(source)
    assert any(fork in str(event.payload) and "turn 2" in str(event.payload) for event in events)
    assert (await runner.resume(fork)).output == "model counted 5"
    assert calls(log) == ["model 2", "tool 2", "model 3", "tool 3", "model 4", "tool 4", "model 5"]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def test_the_cli_forks_and_rewinds_at_a_turn(store: Store, store_url: str, log: Path) -> None:
    runner = Runner(store, [counter])
    source = await completed_source(runner, log)
    code, output = await asyncio.to_thread(
        invoke, "runs", "fork", source, "--at-turn", "3", "--new-id", "cli-fork", "--db", store_url
    )
    assert code == 0, output
    assert "cli-fork" in output
    code, output = await asyncio.to_thread(
        invoke, "runs", "rewind", "cli-fork", "--at-turn", "2", "--db", store_url
    )
    assert code == 0, output
    rewound = output.split()[-1]
    assert (await store.get_run("cli-fork") or {})["status"] == "cancelled"
    assert (await runner.resume(rewound)).output == "model counted 5"
    assert calls(log) == ["model 2", "tool 2", "model 3", "tool 3", "model 4", "tool 4", "model 5"]
    code, output = await asyncio.to_thread(invoke, "runs", "fork", source, "--db", store_url)
    assert code != 0 and "--at-turn" in output


@pytest.mark.crash
async def test_a_fork_of_a_run_killed_mid_turn(store_target: str, log: Path) -> None:
    assert kill_at_line(AGENTS, [store_target, "killed"], {HANG_ENV: "1"}) == "inside\n"
    assert calls(log)[-2:] == ["model 4", "tool 4"]
    async with Runner(store_target, [counter]) as runner:
        before = await runner.store.list_events("killed")
        fork = await runner.fork("killed", at_turn=4)
        result = await runner.resume(fork)
        assert result.output == "model counted 5"
        assert calls(log) == ["model 4", "tool 4", "model 5"]
        assert await runner.store.list_events("killed") == before
        whole = await runner.fork("killed", at_turn=5)  # the whole log, its tool cut off
        assert (await runner.resume(whole)).output == "model counted 5"
        assert calls(log) == ["tool 4", "model 5"]
