"""The OpenAI Agents SDK on zincir for ``make bench``: a turn of ``DurableRunner`` against the
same turn of ``agents.Runner`` without durability.

    python benchmarks/openai_agents_bench.py [--quick]     (this section alone)

One agent (the SDK's ``OpenAIChatCompletionsModel`` on the real ``openai`` client, pointed at
the scripted chat-completions server of tests/agent/openai_server.py, served on loopback by a
child process with ``TCP_NODELAY`` on its socket: without it each reply waits out the
client's 40 ms delayed ACK, which would drown both figures) runs
``TURNS`` turns and answers: each turn one model request asking for one function-tool call,
and the call. The same run goes through ``agents.Runner.run`` and through
``DurableRunner.run`` on a SQLite store (FULL: every record fsynced), alternately, the order
swapped each time, after three warm-up runs of each. A figure is the median per-turn time of
its runs; the ratio, durable over plain, the median of the adjacent pairs' ratios (this
machine's speed drifts within a minute). The overhead is what durability adds to a turn:
two operations (a model request and a tool call) recorded and two log entries.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent))  # tests.agent.openai_server, the scripted server
sys.path.insert(0, str(HERE))

TURNS = 5
"""Model requests that ask for a tool call before the answer, per run."""


class Responder:
    """The server's script for any number of runs side by side: a tool call while the
    conversation holds fewer than ``TURNS`` tool results, else the answer."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def __bool__(self) -> bool:
        return True

    def clear(self) -> None:
        pass

    def popleft(self) -> Any:
        from tests.agent.openai_server import Reply, completion, tool_call

        messages = self.server.received[-1].body["messages"]
        done = sum(1 for message in messages if message["role"] == "tool")
        if done < TURNS:
            arguments = json.dumps({"item": f"item-{done}"})
            return Reply(body=completion(None, [tool_call(f"call-{done}", "check", arguments)]))
        return Reply(body=completion("done"))


def build_agent(client: Any) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, function_tool

    @function_tool
    def check(item: str) -> str:
        """Check one item."""
        return f"{item}: ok"

    model = OpenAIChatCompletionsModel(model="gpt-bench", openai_client=client)
    return Agent(name="checker", instructions="Check the items.", model=model, tools=[check])


async def turns_us(db: str, runs: int, base_url: str) -> tuple[float, float, float]:
    """Per turn (µs): the SDK alone, the SDK on DurableRunner, and the ratio; runs
    alternating."""
    from agents import Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    import zincir
    from zincir.integrations.openai_agents import DurableRunner

    set_tracing_disabled(True)  # neither side exports traces
    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    agent = build_agent(client)
    async with zincir.open_store(db) as store:
        durable = DurableRunner(store)

        async def plain_run(i: int) -> Any:
            return await Runner.run(agent, "Check the items.", max_turns=TURNS + 2)

        async def durable_run(i: int) -> Any:
            return await durable.run(
                agent, "Check the items.", run_id=f"bench-{i}", max_turns=TURNS + 2
            )

        samples: tuple[list[float], list[float]] = ([], [])
        sides = list(zip((plain_run, durable_run), samples, strict=True))
        for i in range(-3, runs):  # three runs of each to warm up
            for run, kept in sides if i % 2 == 0 else sides[::-1]:
                started = time.perf_counter()
                result = await run(i)
                elapsed = (time.perf_counter() - started) / TURNS * 1e6
                assert result.final_output == "done"
                if i >= 0:
                    kept.append(elapsed)
    await client.close()
    plain, durable_samples = samples
    ratios = [d / p for p, d in zip(plain, durable_samples, strict=True)]
    return statistics.median(plain), statistics.median(durable_samples), statistics.median(ratios)


def serve() -> None:
    """The scripted server for the measuring process: prints its port, serves until killed."""
    import socket

    import tests.agent.openai_server as scripted

    class NoDelay(socket.socket):
        def bind(self, address: Any) -> None:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted ones inherit
            super().bind(address)

    scripted.socket.socket = NoDelay  # type: ignore[misc]
    with scripted.chat_server() as server:
        server.replies = Responder(server)  # type: ignore[assignment]
        print(server.port, flush=True)
        while True:
            time.sleep(3600)


def measure(
    bench: Any, run_async: Callable[[Awaitable[Any]], Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """The section's figures and ratios; none (with a note on ``bench``) without the SDK."""
    try:
        import agents  # noqa: F401
    except ImportError:
        bench.notes["openai_agents"] = "skipped: openai-agents is not installed"
        return {}, {}
    saved = os.environ.get("OPENAI_AGENTS_DISABLE_TRACING")
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        base_url = f"http://127.0.0.1:{int(child.stdout.readline())}/v1"
        runs = bench.n(60, 20)
        plain, durable, ratio = run_async(turns_us(bench.db("openai-agents"), runs, base_url))
    finally:
        child.kill()
        child.wait()
        if saved is None:
            os.environ.pop("OPENAI_AGENTS_DISABLE_TRACING", None)
        else:
            os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = saved
    figures = {
        "openai_agents_turn_plain_us": plain,
        "openai_agents_turn_durable_us": durable,
        "openai_agents_turn_overhead_us": durable - plain,
    }
    return figures, {"openai_agents_turn_durable_over_plain": ratio}


def main() -> None:
    import argparse

    from run import Bench, run_async

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    bench = Bench(args.quick, 1)
    figures, ratios = measure(bench, run_async)
    for name, value in {**figures, **ratios}.items():
        print(f"{name:<42} {value:>12.2f}")
    for name, note in bench.notes.items():
        print(f"{name}: {note}")
    print(f"({'quick' if bench.quick else 'full'} sizes)")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
