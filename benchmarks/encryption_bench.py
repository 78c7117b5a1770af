"""Encryption at rest's cost for ``make bench``: a step and an agent turn, plain and sealed.

    python benchmarks/encryption_bench.py [--quick]     (this section alone)

The units are run.py's: a ``WorkflowContext.step`` returning ``step_result`` (at FULL and at
NORMAL, where no fsync hides the CPU) and the durable agent turn (one model request and
three tool calls, ``FunctionModel``, FULL). Each is measured on a plain store and on one
opened with ``encryption=zincir.Encryption(...)`` (AES-256-GCM on every payload written and
read), alternately in the same run: a step round by round on fresh databases, the turn run by
run on two open stores. A ratio is sealed over plain, the median of each round's (steps) or
the medians' (turns).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import zincir  # noqa: E402
from zincir._encryption import KEYS_ENV  # noqa: E402
from zincir.agent import DurableBinding  # noqa: E402

KEY_ID = "bench"
"""The id of the key the sealed figures use (a fresh random key each run)."""


def bench_keys() -> zincir.Encryption:
    """One fresh AES-256 key, active."""
    return zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)


async def turns_us(
    plain_db: str, sealed_db: str, runs: int, turns: int, keys: zincir.Encryption
) -> tuple[float, float]:
    """Per durable turn (µs): on a plain store, on a sealed one; runs alternating."""
    from run import TURN_HANDLERS, durable_turn_agent

    plain = durable_turn_agent(plain_db, turns)
    sealed = durable_turn_agent(sealed_db, turns, keys)
    try:
        samples: tuple[list[float], list[float]] = ([], [])
        for i in range(-3, runs):  # three runs of each to warm up
            for (agent, _, runtime), kept in zip((plain, sealed), samples, strict=True):
                binding = DurableBinding(runtime, f"turn-{i}", TURN_HANDLERS)
                started = time.perf_counter()
                result = await agent.run("Check the items.", durable=binding)
                elapsed = (time.perf_counter() - started) / turns * 1e6
                assert result.output == "done"
                if i >= 0:
                    kept.append(elapsed)
        return statistics.median(samples[0]), statistics.median(samples[1])
    finally:
        await plain[1].close()
        await sealed[1].close()


def measure(
    bench: Any, run_async: Callable[[Awaitable[Any]], Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """The section's figures and ratios. ``$ZINCIR_ENCRYPTION_KEYS`` is ignored while it runs
    (the plain figures stay plain)."""
    from run import step_us

    keys = bench_keys()
    saved = os.environ.pop(KEYS_ENV, None)
    try:
        figures: dict[str, float] = {}
        ratios: dict[str, float] = {}
        steps = bench.n(1000, 300)
        for sync in ("full", "normal"):
            plain, sealed = [], []
            for _ in range(bench.repeat):
                plain.append(run_async(step_us(bench.db(f"enc-step-{sync}"), sync, steps)))
                sealed.append(
                    run_async(
                        step_us(bench.db(f"enc-step-{sync}-sealed"), sync, steps, encryption=keys)
                    )
                )
            figures[f"encryption_step_{sync}_plain_us"] = statistics.median(plain)
            figures[f"encryption_step_{sync}_sealed_us"] = statistics.median(sealed)
            ratios[f"encryption_step_{sync}_sealed_over_plain"] = statistics.median(
                [s / p for s, p in zip(sealed, plain, strict=True)]
            )
        turns = 5
        plain_turn, sealed_turn = run_async(
            turns_us(
                bench.db("enc-turn"), bench.db("enc-turn-sealed"), bench.n(100, 30), turns, keys
            )
        )
        figures["encryption_turn_plain_us"] = plain_turn
        figures["encryption_turn_sealed_us"] = sealed_turn
        ratios["encryption_turn_sealed_over_plain"] = sealed_turn / plain_turn
        return figures, ratios
    finally:
        if saved is not None:
            os.environ[KEYS_ENV] = saved


def main() -> None:
    import argparse
    import json

    from run import Bench, run_async

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of each step figure")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    bench = Bench(args.quick, args.repeat)
    figures, ratios = measure(bench, run_async)
    for name, value in {**figures, **ratios}.items():
        print(f"{name:<42} {value:>12.2f}")
    print(f"({'quick' if bench.quick else 'full'} sizes, {bench.repeat} rounds)")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
