"""A worker serving some agents claims only runs with those names (both backends)."""

from __future__ import annotations

import pytest

from zincir import AgentContext
from zincir._errors import InvalidInput
from zincir.runs._worker import ResumeWorker
from zincir.store import Store


async def let_go(store: Store, run_id: str, name: str) -> None:
    """A run of ``name`` whose owner released it: claimable at once."""
    ctx = await AgentContext.create(store, name=name, run_id=run_id)
    await ctx.close()


async def test_a_worker_with_names_claims_only_runs_with_those_names(store: Store) -> None:
    for run_id, name in (("w1", "weather"), ("m1", "mail"), ("w2", "weather"), ("o1", "other")):
        await let_go(store, run_id, name)
    done: list[str] = []

    async def handler(ctx: AgentContext) -> None:
        done.append(ctx.run_id)
        await ctx.complete()

    assert await ResumeWorker(store, names=[]).run_once(handler) == 0
    assert await ResumeWorker(store, names=["weather"]).run_once(handler) == 2
    assert sorted(done) == ["w1", "w2"]
    assert await ResumeWorker(store, names=("weather", "mail")).run_once(handler) == 1
    assert done[-1] == "m1"
    assert await ResumeWorker(store).run_once(handler) == 1  # no filter: every name
    assert done[-1] == "o1"


async def test_claim_runs_filters_by_name_and_version_together(store: Store) -> None:
    for run_id, name, version in (("a", "x", "v1"), ("b", "x", "v2"), ("c", "y", "v1")):
        ctx = await AgentContext.create(store, name=name, run_id=run_id, app_version=version)
        await ctx.close()
    worker = ResumeWorker(store)
    leases = await store.claim_runs(
        worker.owner,
        worker.lease_ttl,
        10,
        max_attempts=None,
        backoff=worker.delay,
        app_versions=["v1"],
        names=["x"],
    )
    assert [lease.run_id for lease in leases] == ["a"]


@pytest.mark.parametrize("names", ["weather", [""], [3]])
def test_names_must_be_a_list_of_names(names: object) -> None:
    with pytest.raises(InvalidInput, match="names must be"):
        ResumeWorker(None, names=names)  # type: ignore[arg-type]
