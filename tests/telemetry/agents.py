"""A durable agent with two tools for the OpenTelemetry tests, and a process that runs it.

    python -m tests.telemetry.agents DB RUN_ID SPANS

runs the agent through a Runner with every span written, as it ends, to the JSON lines file
SPANS. With ``$ZINCIR_OTEL_KILL`` set the second tool SIGKILLs its own process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from tests.agent.reference import call, request_number, returns
from zincir.agent import Agent, FunctionModel, Runner, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, Usage

KILL_ENV = "ZINCIR_OTEL_KILL"
PROMPT = "How warm is Oslo in Fahrenheit?"


@tool
async def lookup(city: str) -> dict[str, Any]:
    """The temperature of a city, in Celsius."""
    return {"city": city, "celsius": 20}


@tool
async def convert(celsius: float) -> float:
    """Celsius to Fahrenheit."""
    if os.environ.get(KILL_ENV):
        os.kill(os.getpid(), signal.SIGKILL)
    return celsius * 9 / 5 + 32


async def _model(request: ModelRequest) -> ModelResponse:
    number = request_number(request)
    usage = Usage(input_tokens=10 + number, output_tokens=3)
    if number == 0:
        return ModelResponse(parts=[call("call-lookup", "lookup", city="Oslo")], usage=usage)
    if number == 1:
        celsius = returns(request)[0]["celsius"]
        return ModelResponse(parts=[call("call-convert", "convert", celsius=celsius)], usage=usage)
    return ModelResponse(parts=[TextPart(text=f"Oslo: {returns(request)[-1]} F")], usage=usage)


agent = Agent(FunctionModel(_model), name="thermo", tools=[lookup, convert])


def span_line(span: Any) -> str:
    """One finished span as a JSON line: its name, ids, parent and attributes."""
    context = span.get_span_context()
    return json.dumps(
        {
            "name": span.name,
            "trace_id": f"{context.trace_id:032x}",
            "span_id": f"{context.span_id:016x}",
            "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
            "attributes": {key: _plain(value) for key, value in span.attributes.items()},
        }
    )


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def file_exporter(path: str) -> Any:
    """A span exporter appending each span to ``path`` as it ends (fsynced): a process
    killed later has written every span that ended before the kill."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class JsonLines(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            with open(path, "a", encoding="utf-8") as out:
                for span in spans:
                    out.write(span_line(span) + "\n")
                out.flush()
                os.fsync(out.fileno())
            return SpanExportResult.SUCCESS

    return JsonLines()


async def main(db: str, run_id: str, spans: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(file_exporter(spans)))
    trace.set_tracer_provider(provider)
    async with Runner(db, [agent], lease_ttl=timedelta(seconds=60)) as runner:
        result = await runner.run(agent, PROMPT, run_id=run_id)
    sys.stdout.write(f"output {result.output}\n")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
