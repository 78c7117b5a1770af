"""Restart checkpoints on PostgreSQL under real concurrency: saves racing from two stores
(separate pools, as two processes would have) never move a checkpoint backwards."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

import zincir
from zincir import RevisionConflict
from zincir.store import Store

RUN, CHECKPOINT = "run-1", "consumer"


@pytest.fixture
async def stores(postgres_url: str) -> AsyncIterator[tuple[Store, Store]]:
    first, second = zincir.open_store(postgres_url), zincir.open_store(postgres_url)
    yield first, second
    await first.close()
    await second.close()


async def test_racing_revisions_never_go_backwards(stores: tuple[Store, Store]) -> None:
    """Savers of shuffled revisions race a reader: every revision the reader sees is at least
    the one it saw before, and the last stored is the highest any saver stored."""
    revisions = list(range(1, 41)) * 2
    random.Random(7).shuffle(revisions)
    stored: list[int] = []
    seen: list[int] = []
    done = asyncio.Event()

    async def save(store: Store, revision: int) -> None:
        payload = f'{{"revision":{revision}}}'
        try:
            row = await store.save_restart_checkpoint(RUN, CHECKPOINT, revision, payload)
        except RevisionConflict:
            return
        assert row.revision == revision and row.payload_json == payload
        stored.append(revision)

    async def watch(store: Store) -> None:
        while not done.is_set():
            row = await store.load_restart_checkpoint(RUN, CHECKPOINT)
            if row is not None:
                seen.append(row.revision)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch(stores[1]))
    await asyncio.gather(
        *(save(stores[index % 2], revision) for index, revision in enumerate(revisions))
    )
    done.set()
    await watcher
    final = await stores[0].load_restart_checkpoint(RUN, CHECKPOINT)
    assert final is not None and final.revision == max(stored) == 40
    assert seen == sorted(seen)


async def test_one_revision_from_two_stores_has_one_winner(stores: tuple[Store, Store]) -> None:
    """The same revision with different payloads: one stores it, every other one conflicts;
    repeating the winner's payload returns the stored row."""
    for revision in range(1, 11):
        outcomes = await asyncio.gather(
            *(
                stores[worker % 2].save_restart_checkpoint(
                    RUN, CHECKPOINT, revision, f'{{"worker":{worker}}}'
                )
                for worker in range(8)
            ),
            return_exceptions=True,
        )
        won = [row for row in outcomes if not isinstance(row, BaseException)]
        assert len(won) == 1, outcomes
        assert all(isinstance(o, RevisionConflict) for o in outcomes if o not in won)
        again = await stores[1].save_restart_checkpoint(
            RUN, CHECKPOINT, revision, won[0].payload_json
        )
        assert again == won[0]


async def test_a_removal_racing_saves_leaves_a_consistent_row(
    stores: tuple[Store, Store],
) -> None:
    """Removes interleaved with saves: whatever is left is one whole row a saver stored."""
    await stores[0].save_restart_checkpoint(RUN, CHECKPOINT, 0, "0")
    jobs = []
    for revision in range(1, 21):
        jobs.append(stores[revision % 2].save_restart_checkpoint(RUN, CHECKPOINT, revision, "1"))
        jobs.append(stores[(revision + 1) % 2].remove_restart_checkpoint(RUN, CHECKPOINT))
    outcomes = await asyncio.gather(*jobs, return_exceptions=True)
    assert not [
        o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, RevisionConflict)
    ]
    left = await stores[0].load_restart_checkpoint(RUN, CHECKPOINT)
    assert left is None or (left.payload_json == "1" and 1 <= left.revision <= 20)
