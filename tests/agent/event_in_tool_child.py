"""An agent whose tool delivers an application event, then (with KILL_IN_TOOL) is killed.

python event_in_tool_child.py DATABASE RUN_ID EVENTS_FILE
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import zincir
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, deliver_event, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

binding: DurableBinding | None = None


@tool
async def lookup(city: str) -> dict[str, str]:
    """Announce the lookup, then look the city up."""
    assert binding is not None
    await deliver_event(binding, "announce.lookup", 7, {"name": "lookup", "data": city})
    if os.environ.get("KILL_IN_TOOL"):
        os.kill(os.getpid(), signal.SIGKILL)  # after the event's record, before the tool's
    return {"city": city, "sky": "clear"}


def model(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role != "tool":
        call = ToolCallPart(tool_call_id="c1", tool_name="lookup", arguments={"city": "Oslo"})
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(text="Oslo: clear.")])


async def main(database: str, run_id: str, events_file: str) -> None:
    global binding

    def sink(event: object) -> None:
        with open(events_file, "a") as out:
            out.write(json.dumps(event.data) + "\n")  # type: ignore[attr-defined]

    agent = Agent(FunctionModel(model), name="announcer", tools=[lookup], event_sink=sink)
    store = zincir.open_store(database)
    handlers = Handlers(model_request="m", tool_call="t", event_delivery="e", approval_resume=None)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    binding = DurableBinding(zincir.LocalRuntime(store, registry), run_id, handlers)
    result = await agent.run("Look Oslo up.", durable=binding)
    print(result.output)
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
