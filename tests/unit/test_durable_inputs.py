"""Bad options of the durable runtimes raise InvalidInput (never OverflowError or TypeError)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import count
from tests.runtime_conformance import Calls, make_invocation, registry_with
from zincir import InvalidInput, SQLiteStore
from zincir._validate import DEFAULT_POLL_INTERVAL
from zincir.durable import CommandHandler, HandlerRegistry, LocalRuntime, RetryPolicy

BAD_DURATIONS = [1e20, -1e20, timedelta.max, float("inf"), float("nan"), "1", None, True, [1]]


# The constructor's own checks (no store call): one backend is enough, db_path keeps it on SQLite.
@pytest.mark.parametrize("option", ["claim_ttl", "poll_interval"])
@pytest.mark.parametrize("value", [*BAD_DURATIONS, 0, timedelta(0), -1])
def test_runtime_durations(store: SQLiteStore, db_path: Path, option: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=option):
        LocalRuntime(store, HandlerRegistry(), **{option: value})
    assert count(db_path, "operations") == 0


@pytest.mark.parametrize("value", [0, -1, 2**63, 10**30, 1.5, "1", True])
def test_runtime_max_input_bytes(store: SQLiteStore, value: Any) -> None:
    with pytest.raises(InvalidInput, match="max_input_bytes"):
        LocalRuntime(store, HandlerRegistry(), max_input_bytes=value)


def test_runtime_needs_a_store() -> None:
    with pytest.raises(InvalidInput, match="store"):
        LocalRuntime("zincir.db", HandlerRegistry())  # type: ignore[arg-type]


async def test_runtime_defaults(store: SQLiteStore) -> None:
    runtime = LocalRuntime(
        store, HandlerRegistry(), max_input_bytes=None, claim_ttl=timedelta(days=36_500)
    )
    assert runtime.poll_interval == DEFAULT_POLL_INTERVAL
    assert runtime.max_input_bytes is None
    huge = LocalRuntime(store, registry_with(Calls()), claim_ttl=timedelta(days=36_500))
    record = await huge.execute(make_invocation("run-huge-ttl"))  # the expiry is storable
    assert record.invocation.run_id == "run-huge-ttl"


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": 10**30},
        {"max_attempts": 2.0},
        {"max_attempts": True},
        {"max_attempts": "3"},
        {"initial_interval": 1e20},
        {"initial_interval": timedelta.max},
        {"initial_interval": -1},
        {"initial_interval": "1"},
        {"initial_interval": None},
        {"max_interval": timedelta.max},
        {"max_interval": float("nan")},
        {"backoff": float("inf")},
        {"backoff": float("nan")},
        {"backoff": 0.5},
        {"backoff": "2"},
        {"backoff": True},
    ],
)
def test_retry_policy_options(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match=next(iter(options))):
        RetryPolicy(**options)


def test_retry_delays_never_overflow() -> None:
    steep = RetryPolicy(
        max_attempts=2**63 - 1,
        initial_interval=1,
        backoff=1e308,
        max_interval=timedelta(days=36_500),
    )
    assert steep.delay(1) == timedelta(seconds=1)
    assert steep.delay(2) == steep.delay(2**62) == timedelta(days=36_500)
    flat = RetryPolicy(max_attempts=2**63 - 1, backoff=1)
    assert flat.delay(2**62) == timedelta(milliseconds=100)
    assert RetryPolicy().delay(3) == timedelta(milliseconds=400)
    assert RetryPolicy().delay(100) == timedelta(seconds=10)


@pytest.mark.parametrize("value", [*BAD_DURATIONS, 0, -1])
def test_command_timeout(value: Any) -> None:
    with pytest.raises(InvalidInput, match="timeout"):
        CommandHandler(["true"], value)


@pytest.mark.parametrize(
    "options",
    [
        {"max_output_bytes": 10**30},
        {"max_output_bytes": 0},
        {"max_output_bytes": True},
        {"env": {"PATH": 1}},
        {"env": {1: "x"}},
        {"env": ["PATH"]},
    ],
)
def test_command_options(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match=next(iter(options))):
        CommandHandler(["true"], **options)
