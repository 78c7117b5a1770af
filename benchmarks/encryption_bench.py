"""Encryption at rest's cost for ``make bench``: a step and an agent turn, plain and sealed.

    python benchmarks/encryption_bench.py [--quick]     (this section alone)

The units are run.py's: a ``WorkflowContext.step`` returning ``step_result`` (at FULL and at
NORMAL, where no fsync hides the CPU) and the durable agent turn (one model request and
three tool calls, ``FunctionModel``, FULL). Each is measured on a plain store and on one
opened with ``encryption=zincir.Encryption(...)`` (AES-256-GCM on every payload written and
read), alternately on two open stores: steps in blocks of ``BLOCK``, turns run by run, the
order swapped each time. A figure is the median of its samples; a ratio, sealed over plain,
the median of the adjacent pairs' ratios (this machine's speed drifts within a minute).
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

BLOCK = 50
"""Steps timed together, alternating between the plain and the sealed store."""
KEY_ID = "bench"
"""The id of the key the sealed figures use (a fresh random key each run)."""


def bench_keys() -> zincir.Encryption:
    """One fresh AES-256 key, active."""
    return zincir.Encryption({KEY_ID: zincir.Encryption.generate_key()}, KEY_ID)


def medians(plain: list[float], sealed: list[float]) -> tuple[float, float, float]:
    """The median of each, and the median of the pairs' ratios (sealed over plain)."""
    ratios = [s / p for p, s in zip(plain, sealed, strict=True)]
    return statistics.median(plain), statistics.median(sealed), statistics.median(ratios)


async def steps_us(
    plain_db: str, sealed_db: str, synchronous: str, n: int, keys: zincir.Encryption
) -> tuple[float, float, float]:
    """Per step (µs): on a plain store, on a sealed one, and the ratio; blocks alternating."""
    from run import warm_workflow

    plain_steps = warm_workflow(plain_db, synchronous, 50, "steps")
    sealed_steps = warm_workflow(sealed_db, synchronous, 50, "steps", encryption=keys)
    async with plain_steps as plain, sealed_steps as sealed:
        samples: dict[Any, list[float]] = {plain: [], sealed: []}
        for block in range(max(n // BLOCK, 1)):
            for step in (plain, sealed) if block % 2 == 0 else (sealed, plain):
                started = time.perf_counter()
                for i in range(block * BLOCK, (block + 1) * BLOCK):
                    await step(i)
                samples[step].append((time.perf_counter() - started) / BLOCK * 1e6)
    return medians(samples[plain], samples[sealed])


async def turns_us(
    plain_db: str, sealed_db: str, runs: int, turns: int, keys: zincir.Encryption
) -> tuple[float, float, float]:
    """Per durable turn (µs): on a plain store, on a sealed one, and the ratio; runs
    alternating."""
    from run import TURN_HANDLERS, durable_turn_agent

    plain = durable_turn_agent(plain_db, turns)
    sealed = durable_turn_agent(sealed_db, turns, keys)
    try:
        samples: tuple[list[float], list[float]] = ([], [])
        for i in range(-3, runs):  # three runs of each to warm up
            pairs = list(zip((plain, sealed), samples, strict=True))
            for (agent, _, runtime), kept in pairs if i % 2 == 0 else pairs[::-1]:
                binding = DurableBinding(runtime, f"turn-{i}", TURN_HANDLERS)
                started = time.perf_counter()
                result = await agent.run("Check the items.", durable=binding)
                elapsed = (time.perf_counter() - started) / turns * 1e6
                assert result.output == "done"
                if i >= 0:
                    kept.append(elapsed)
        return medians(*samples)
    finally:
        await plain[1].close()
        await sealed[1].close()


def measure(
    bench: Any, run_async: Callable[[Awaitable[Any]], Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """The section's figures and ratios. ``$ZINCIR_ENCRYPTION_KEYS`` is ignored while it runs
    (the plain figures stay plain)."""
    keys = bench_keys()
    saved = os.environ.pop(KEYS_ENV, None)
    try:
        figures: dict[str, float] = {}
        ratios: dict[str, float] = {}
        steps = bench.n(1000, 300) * bench.repeat
        for sync in ("full", "normal"):
            plain, sealed, ratio = run_async(
                steps_us(bench.db(f"enc-{sync}"), bench.db(f"enc-{sync}-sealed"), sync, steps, keys)
            )
            figures[f"encryption_step_{sync}_plain_us"] = plain
            figures[f"encryption_step_{sync}_sealed_us"] = sealed
            ratios[f"encryption_step_{sync}_sealed_over_plain"] = ratio
        plain, sealed, ratio = run_async(
            turns_us(bench.db("enc-turn"), bench.db("enc-turn-sealed"), bench.n(100, 30), 5, keys)
        )
        figures["encryption_turn_plain_us"] = plain
        figures["encryption_turn_sealed_us"] = sealed
        ratios["encryption_turn_sealed_over_plain"] = ratio
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
    parser.add_argument("--repeat", type=int, default=5, help="steps: 1,000 (300) times this")
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
