"""A web page following an agent's answer through its durable stream.

``python examples/stream_web/server.py zincir.db [PORT]`` serves, on 127.0.0.1:

- ``/`` : index.html, which opens ``/api/runs/RUN_ID/stream`` with ``EventSource`` for the
  run named by ``?run=RUN_ID`` and renders the conversation as it is written;
- ``/api/runs/{run_id}/stream`` : ``zincir.streams.sse_app`` mounted in this app.

Start a run with ``agent.py`` beside this file (``Runner.run_stream`` on OpenAIChatModel) on
the same database, then open the address it prints, ``http://127.0.0.1:PORT/?run=RUN_ID``.
Stop this server, a worker, or both, and start them again: the page reconnects with
``Last-Event-ID`` and ends with exactly the final answer.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount, Route

import zincir
from zincir.streams import sse_app

PAGE = Path(__file__).with_name("index.html")


def build(db: str) -> Starlette:
    store = zincir.open_store(db)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await store.close()

    async def index(request: object) -> FileResponse:
        return FileResponse(PAGE, headers={"cache-control": "no-store"})

    # sse_app refuses every client that is not loopback; behind a login, pass
    # authorize=lambda request: <whether this user may read this run>.
    return Starlette(
        routes=[Route("/", index), Mount("/api", app=sse_app(store))], lifespan=lifespan
    )


if __name__ == "__main__":
    database = sys.argv[1] if len(sys.argv) > 1 else "zincir.db"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
    uvicorn.run(build(database), host="127.0.0.1", port=port, log_level="warning")
