"""Runs the weather agent streamed through a Runner, for the stream's crash test.

    python stream_worker.py TARGET RUN_ID BASE_URL start|resume

``start`` streams a new run (the test kills it mid-answer); ``resume`` resumes it in this
new process and prints the run's conversation as JSON.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.streams.chat import PROMPT, agent, client, dump  # noqa: E402
from zincir.agent import Runner  # noqa: E402


async def main(target: str, run_id: str, base_url: str, mode: str) -> None:
    chat = client(base_url)
    async with Runner(target, [agent(chat)]) as runner:
        if mode == "start":
            async for _ in runner.run_stream("weather", PROMPT, run_id=run_id):
                pass
            raise SystemExit("the stream was to stall until the process was killed")
        result = await runner.resume(run_id)
        sys.stdout.write(dump(result.messages) + "\n")
    await chat.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
