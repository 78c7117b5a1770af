"""A durable agent run is a zincir run: created on the first run, taken over afterwards.

An agent run's ``config`` holds what resuming it needs: ``agent`` (the agent's name),
``prompt``, ``stream`` (started with ``run_stream``) and, when set, ``step_namespace``.
"""

from __future__ import annotations

from typing import Any

from .._errors import InputDrift, RunExists
from .._json import loads_strict
from ..runs import AgentContext
from ..store import RunRecord, Store
from ._binding import DurableBinding

__all__ = ["check_prompt", "run_config", "stored_config", "take_run"]

_SHOWN = 60  # characters of a prompt shown in an error


def run_config(name: str, prompt: str, binding: DurableBinding, *, stream: bool) -> dict[str, Any]:
    """The ``config`` an agent run is created with."""
    config: dict[str, Any] = {"agent": name, "prompt": prompt, "stream": stream}
    if binding.step_namespace is not None:
        config["step_namespace"] = binding.step_namespace
    return config


def stored_config(row: RunRecord) -> dict[str, Any]:
    """The run's ``config`` as a dict (empty when it is not one)."""
    try:
        config = loads_strict(row["config"]) if row["config"] else {}
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def check_prompt(row: RunRecord, prompt: str) -> None:
    """InputDrift when the agent run was started with another prompt (runs stored before
    agent runs kept their prompt, and runs an agent did not start, are not checked)."""
    config = stored_config(row)
    stored = config.get("prompt")
    if not isinstance(config.get("agent"), str) or not isinstance(stored, str):
        return
    if stored == prompt:
        return
    raise InputDrift(
        f"this run was started with a different prompt ({_shorten(stored)}), not "
        f"{_shorten(prompt)}; use a new run id for a new prompt, or continue this run with "
        "its own prompt (Runner.resume(run_id))",
        run_id=row["id"],
    )


def _shorten(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…")


async def take_run(
    store: Store,
    binding: DurableBinding,
    *,
    name: str,
    provider: str,
    exists: bool,
    config: dict[str, Any],
) -> tuple[AgentContext, bool]:
    """The run's context and whether this call owns it: a context of this process that
    already holds the run's lease (a ResumeWorker's handler) is used as it is (owned by its
    holder, so False); otherwise the run is created (status ``running``, with ``config``) or
    recovered (``LeaseHeld`` while another owner's lease is live)."""
    held = AgentContext.held_here(store, binding.run_id) if exists else None
    if held is not None:
        held.claim_use()
        return held, False
    ttl = binding.lease_ttl
    if not exists:
        try:
            ctx = await AgentContext.create(
                store,
                name=name,
                provider=provider,
                config=config,
                run_id=binding.run_id,
                lease_ttl=ttl,
                app_version=binding.app_version,
            )
        except RunExists:
            pass
        else:
            ctx.claim_use()
            return ctx, True
    ctx = await AgentContext.recover(store, binding.run_id, lease_ttl=ttl)
    ctx.claim_use()
    return ctx, True
