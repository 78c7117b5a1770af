"""``system_stamp``: the blocking LangGraph saver's fast ``to_db(system_clock())``."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import zincir._time as zincir_time
from zincir._time import from_db, system_clock, system_stamp, to_db


def test_it_is_the_system_clock_as_stored_between_two_readings() -> None:
    for _ in range(1000):
        before = to_db(system_clock())
        stamp = system_stamp()
        after = to_db(system_clock())
        assert before <= stamp <= after
        assert len(stamp) == len(before) and stamp.endswith("Z")
        assert to_db(from_db(stamp)) == stamp


def test_the_cached_second_is_formatted_again_when_the_second_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter(
        [
            1_796_428_799_999_999_000,  # 2026-12-04T23:59:59.999999Z
            1_796_428_800_000_000_999,  # the next day
            1_796_428_800_000_001_000,
            59_000,  # 1970: a clock set back
        ]
    )
    clock = SimpleNamespace(
        time_ns=lambda: next(readings), strftime=time.strftime, gmtime=time.gmtime
    )
    monkeypatch.setattr(zincir_time, "time", clock)  # this module's clock only
    assert [system_stamp() for _ in range(4)] == [
        "2026-12-04T23:59:59.999999Z",
        "2026-12-05T00:00:00.000000Z",
        "2026-12-05T00:00:00.000001Z",
        "1970-01-01T00:00:00.000059Z",
    ]
