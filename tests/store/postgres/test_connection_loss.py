"""A broken connection surfaces as ConnectionLost (a retryable StoreUnavailable), never as a
silently dropped write; the pool replaces the connection and the next call works."""

from __future__ import annotations

from datetime import timedelta

import pytest

import zincir
from tests.postgres_server import PostgresServer
from zincir.store import NewEvent

TTL = timedelta(seconds=30)


async def test_a_terminated_connection_raises_connection_lost_then_recovers(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    store = zincir.open_store(f"{postgres_url}&application_name=cut_off")
    try:
        lease = await store.create_run("r", name="n", owner="me", ttl=TTL)
        assert postgres_server.terminate_backends("cut_off") >= 1
        with pytest.raises(zincir.ConnectionLost) as raised:
            await store.append_events(lease, [NewEvent("note", '{"n":1}')])
        assert isinstance(raised.value, zincir.StoreUnavailable)
        # Nothing of the failed call was stored; the same call again goes through.
        assert [event.type for event in await store.list_events("r")] == ["state_transition"]
        await store.append_events(lease, [NewEvent("note", '{"n":1}')])
        assert [event.seq for event in await store.list_events("r")] == [1, 2]
    finally:
        await store.close()


async def test_a_stopped_server_raises_connection_lost_and_nothing_is_half_written(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    store = zincir.open_store(postgres_url)
    try:
        lease = await store.create_run("r", name="n", owner="me", ttl=TTL)
        postgres_server.restart()  # every pooled connection is now broken
        with pytest.raises(zincir.StoreUnavailable):
            await store.append_events(lease, [NewEvent("note", '{"n":1}')] * 3)
        events = await store.list_events("r")
        assert [event.seq for event in events] == [1]  # all three or none: none
        assert (await store.append_events(lease, [NewEvent("note", '{"n":2}')])) == 2
    finally:
        await store.close()
