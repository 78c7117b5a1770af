"""A durable setup for the agent tests: a store, a registry served by the agent, a binding.

The ``durable`` fixture stands on ``store``, so each test on it runs once per backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

import zincir
from tests.agent.reference import HANDLERS
from zincir.agent import Agent, DurableBinding, Handlers, serve
from zincir.store import Store


@dataclass
class Durable:
    """One store, where it lives (a SQLite path or a PostgreSQL URL, for ``select``) and
    the pieces that bind an agent to it."""

    target: str
    store: Store

    def binding(
        self,
        agent: Agent,
        run_id: str = "run-1",
        *,
        handlers: Handlers = HANDLERS,
        namespace: str | None = None,
    ) -> DurableBinding:
        registry = zincir.HandlerRegistry()
        serve(registry, agent, handlers)
        runtime = zincir.LocalRuntime(self.store, registry)
        return DurableBinding(runtime, run_id, handlers, step_namespace=namespace)


@pytest.fixture
async def durable(store: Store, store_url: str) -> AsyncIterator[Durable]:
    yield Durable(store_url, store)
