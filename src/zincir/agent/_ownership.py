"""A durable agent run is a zincir run: created on the first run, taken over afterwards."""

from __future__ import annotations

from .._errors import RunExists
from ..runs import AgentContext
from ..store import Store
from ._binding import DurableBinding

__all__ = ["take_run"]


async def take_run(
    store: Store, binding: DurableBinding, *, name: str, provider: str, exists: bool
) -> AgentContext:
    """Create the run (status ``running``) or recover it (``LeaseHeld`` while it is owned)."""
    ttl = binding.lease_ttl
    if not exists:
        try:
            return await AgentContext.create(
                store,
                name=name,
                provider=provider,
                run_id=binding.run_id,
                lease_ttl=ttl,
                app_version=binding.app_version,
            )
        except RunExists:
            pass
    return await AgentContext.recover(store, binding.run_id, lease_ttl=ttl)
