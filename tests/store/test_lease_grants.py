"""Every grant of a lease (a created run, a takeover, an opened run taken over) keeps the
lease's TTL on the run's row and sets its expiry to the store's clock plus that TTL, on
every backend; a renewal moves the expiry on by the TTL and a release clears both owner and
expiry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from zincir import LeaseHeld
from zincir._time import to_db
from zincir.store import Store
from zincir.store._sql import Rules, Tx, sql
from zincir.testing import FakeClock

_TTL = sql("SELECT lease_ttl_us FROM agent_runs WHERE id = ?")


async def _ttl_us(store: Store) -> Any:
    assert isinstance(store, Rules)

    def read(tx: Tx) -> Any:
        row = tx.one(_TTL, ("r",))
        assert row is not None
        return row[0]

    return await store._read_tx(read)


async def _lease(store: Store) -> tuple[Any, Any]:
    run = await store.get_run("r")
    assert run is not None
    return run["lease_owner"], run["lease_expires_at"]


async def test_a_lease_keeps_its_ttl_and_expires_by_the_stores_clock(
    fake_store: Store, clock: FakeClock
) -> None:
    created = await fake_store.create_run("r", name="r", owner="a", ttl=timedelta(seconds=10))
    assert await _ttl_us(fake_store) == 10_000_000
    assert await _lease(fake_store) == ("a", to_db(clock() + timedelta(seconds=10)))

    clock.advance(4)
    assert await fake_store.renew_lease(created)
    assert await _lease(fake_store) == ("a", to_db(clock() + timedelta(seconds=10)))
    with pytest.raises(LeaseHeld):
        await fake_store.acquire_run("r", owner="b", ttl=timedelta(seconds=30))

    clock.advance(11)
    taken = await fake_store.acquire_run("r", owner="b", ttl=timedelta(seconds=30))
    assert taken.token == 2
    assert await _ttl_us(fake_store) == 30_000_000
    assert await _lease(fake_store) == ("b", to_db(clock() + timedelta(seconds=30)))
    assert not await fake_store.renew_lease(created)  # the first owner is fenced out

    clock.advance(31)
    opened = await fake_store.open_run("r", name="r", owner="c", ttl=timedelta(seconds=7))
    assert opened.token == 3
    assert await _ttl_us(fake_store) == 7_000_000
    assert await _lease(fake_store) == ("c", to_db(clock() + timedelta(seconds=7)))

    assert await fake_store.release_lease(opened)
    assert await _lease(fake_store) == (None, None)
    assert not await fake_store.release_lease(opened)
