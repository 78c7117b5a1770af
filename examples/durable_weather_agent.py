"""A durable weather agent on any OpenAI-compatible server: kill it, start it again, it goes on.

Run it against OpenAI, or a local server that speaks the chat-completions API (Ollama,
vLLM, llama.cpp, LM Studio, …) by its base URL::

    pip install "zincir[openai]"
    export OPENAI_BASE_URL=http://localhost:11434/v1   # e.g. Ollama; unset for OpenAI
    export OPENAI_MODEL=llama3.1                       # a model that can call tools
    export OPENAI_API_KEY=sk-...                       # not needed by most local servers
    python examples/durable_weather_agent.py Oslo

The agent looks the forecast up (a slow call: a few seconds), then saves a report to
``weather-reports.txt``. Every model request and tool call is recorded in ``weather.db``
(``--db``) under the run id the script prints first. Press Ctrl-C or ``kill -9`` it while
it looks the forecast up, then, with the same ``OPENAI_*`` variables, either

- run it again with the same run id: ``python examples/durable_weather_agent.py Oslo
  --run-id RUN_ID`` (or ``--resume RUN_ID``, which reads the prompt from the run), or
- let a worker finish every unfinished run: ``zincir worker --agent
  examples.durable_weather_agent:agent --db weather.db`` (from the repository's root;
  Ctrl-C stops it).

Either way the run continues from its log at once, without waiting for the dead process's
lease: the model requests that had finished are read back, not asked again; the tool that
was cut off runs again. A provider outage, a 429 or a tool that raises does not end the
run either: zincir retries provider failures with a durable backoff, and tells the model
about malformed arguments and tool errors.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import uuid

from openai import AsyncOpenAI

from zincir import ZincirError
from zincir.agent import Agent, OpenAIChatModel, Runner, tool

SERVICE_SECONDS = float(os.environ.get("WEATHER_SERVICE_SECONDS", "3"))
"""How long the pretend weather service takes to answer: time to kill the agent in it."""
REPORTS = os.environ.get("WEATHER_REPORTS", "weather-reports.txt")


@tool
async def get_forecast(city: str) -> dict[str, object]:
    """Get tomorrow's forecast for a city."""
    print(f"  looking up the forecast for {city}…", flush=True)
    await asyncio.sleep(SERVICE_SECONDS)  # a slow weather service (made up, offline)
    seed = hashlib.sha256(city.lower().encode()).digest()
    sky = ("sunny", "cloudy", "rain", "snow", "fog")[seed[0] % 5]
    return {"city": city, "sky": sky, "high_c": seed[1] % 30 - 5, "wind_kmh": seed[2] % 40}


@tool
async def save_report(city: str, report: str) -> str:
    """Save the finished weather report for a city."""
    with open(REPORTS, "a", encoding="utf-8") as out:
        out.write(f"{city}: {report}\n")
    print(f"  saved the report for {city} to {REPORTS}", flush=True)
    return f"saved to {REPORTS}"


agent = Agent(
    OpenAIChatModel(
        os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
        client=AsyncOpenAI(
            base_url=os.environ.get("OPENAI_BASE_URL"),  # None: the OpenAI API
            api_key=os.environ.get("OPENAI_API_KEY", "not-needed-by-a-local-server"),
        ),
    ),
    name="weather",
    instructions=(
        "You write short weather reports. Look the forecast up with get_forecast, then "
        "save a two-sentence report with save_report, then answer with the report."
    ),
    tools=[get_forecast, save_report],
)


def prompt_for(city: str) -> str:
    return f"Write tomorrow's weather report for {city}."


async def main() -> None:
    parser = argparse.ArgumentParser(description="A durable weather agent.")
    parser.add_argument("city", nargs="?", help="the city to report on")
    parser.add_argument("--db", default="weather.db", help="the SQLite file (or postgresql:// URL)")
    parser.add_argument("--run-id", help="continue this run (the same city)")
    parser.add_argument("--resume", metavar="RUN_ID", help="continue this run, prompt and all")
    args = parser.parse_args()
    if not args.city and not args.resume:
        parser.error("name a city, or --resume RUN_ID")
    async with Runner(args.db, [agent]) as runner:
        if args.resume:
            print(f"run {args.resume}: resumed", flush=True)
            result = await runner.resume(args.resume)
        else:
            run_id = args.run_id or f"weather-{uuid.uuid4().hex[:12]}"
            print(f"run {run_id} (after a crash: --run-id {run_id})", flush=True)
            result = await runner.run(agent, prompt_for(args.city), run_id=run_id)
    print(result.output)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # the run keeps what it did so far
        raise SystemExit("stopped: start it again with the same run id to continue") from None
    except ZincirError as error:  # says what happened and what to do (e.g. InputDrift)
        raise SystemExit(f"{type(error).__name__}: {error}") from None
