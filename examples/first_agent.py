import asyncio
import os
import sys

from openai import AsyncOpenAI

from zincir.agent import Agent, OpenAIChatModel, Runner, tool


@tool
async def get_weather(city: str) -> dict:
    """Today's weather in a city."""
    return {"city": city, "sky": "light rain", "high_c": 14}  # call a real service here


agent = Agent(
    OpenAIChatModel(
        os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
        client=AsyncOpenAI(
            base_url=os.environ.get("OPENAI_BASE_URL"),  # e.g. http://localhost:11434/v1
            api_key=os.environ.get("OPENAI_API_KEY", "not-needed-locally"),
        ),
    ),
    name="weather",
    instructions="Look the weather up with get_weather, then answer in two sentences.",
    tools=[get_weather],
)


async def main() -> None:
    async with Runner("weather.db", [agent]) as runner:
        if len(sys.argv) > 1:  # python first_agent.py RUN_ID: finish a run after a crash
            result = await runner.resume(sys.argv[1])
        else:
            result = await runner.run(agent, "What is the weather in Oslo today?")
        print(result.run_id, result.output)


if __name__ == "__main__":  # not when `zincir worker --agent first_agent:agent` imports it
    asyncio.run(main())
