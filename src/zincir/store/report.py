"""Plain-text views of runs and their event logs (``zincir runs``, the demo's summary)."""

from __future__ import annotations

import json
from typing import Any

from .._errors import RunNotFound
from ._sqlite import SQLiteStore

__all__ = ["format_run", "format_runs"]


def _short(value: Any, width: int = 90) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def format_runs(runs: list[dict[str, Any]]) -> str:
    """One line per run: id, status, name, provider, events, updated."""
    if not runs:
        return "no runs"
    lines = [f"{'run id':<36}  {'status':<9}  {'events':>6}  {'updated':<27}  name"]
    for run in runs:
        lines.append(
            f"{run['id']:<36}  {run['status']:<9}  {run['last_seq']:>6}  "
            f"{run['updated_at']:<27}  {run['name']}"
        )
    return "\n".join(lines)


async def format_run(store: SQLiteStore, run_id: str, *, limit: int | None = None) -> str:
    """A run's summary and its event log."""
    run = await store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r} in {store.path}", run_id=run_id)
    lease = (
        f"held by {run['lease_owner']} until {run['lease_expires_at']}"
        if run["lease_owner"] else "none"
    )
    lines = [
        f"run       {run['id']}",
        f"name      {run['name']}",
        f"status    {run['status']}",
        f"provider  {run['provider'] or '-'}",
        f"lease     {lease} (token {run['lease_token']})",
        f"config    {run['config']}",
        f"created   {run['created_at']}",
        f"updated   {run['updated_at']}",
        f"events    {run['last_seq']}",
        "",
        f"{'seq':>5}  {'type':<20}  payload",
    ]
    for event in await store.list_events(run_id, limit=limit):
        lines.append(f"{event.seq:>5}  {event.type:<20}  {_short(event.payload)}")
    return "\n".join(lines)
