"""A durable setup for the agent tests: a store, a registry served by the agent, a binding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import HANDLERS
from zincir.agent import Agent, DurableBinding, Handlers, serve


@dataclass
class Durable:
    """One store and the pieces that bind an agent to it."""

    db: Path
    store: zincir.SQLiteStore

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
async def durable(tmp_path: Path) -> AsyncIterator[Durable]:
    db = tmp_path / "x.db"
    store = zincir.open_store(db)
    yield Durable(db, store)
    await store.close()
