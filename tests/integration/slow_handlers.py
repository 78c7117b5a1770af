"""A registry for the deployment's drain test: a tool call that is still running when the
worker is told to stop, and leaves a file saying it started and finished."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry

registry = HandlerRegistry()


@registry.handler(OperationKind.TOOL_CALL, "slow-tool")
async def slow(invocation: Invocation, request: dict[str, Any]) -> dict[str, Any]:
    marks = Path(os.environ["SLOW_HANDLER_MARKS"])
    with marks.open("a") as out:
        out.write("started\n")
    await asyncio.sleep(request["seconds"])
    with marks.open("a") as out:
        out.write("finished\n")
    return {"slept": request["seconds"]}
