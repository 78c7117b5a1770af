"""One process of a multi-process throughput figure: N durable steps of its own run.

python benchmarks/steps_child.py STORE RUN_ID N
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from peers_child import step_result  # noqa: E402  (what every benchmarked step returns)

import zincir  # noqa: E402
from zincir.workflow import WorkflowContext  # noqa: E402


async def main(target: str, run_id: str, steps: int, start_at: float) -> None:
    store = zincir.open_store(target)
    try:
        async with await WorkflowContext.open(store, run_id) as wf:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            started = time.time()
            for i in range(steps):
                await wf.step(f"step-{i}", lambda i=i: step_result(i))
            ended = time.time()
            await wf.complete()
        print(json.dumps({"start": started, "end": ended, "steps": steps}))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
