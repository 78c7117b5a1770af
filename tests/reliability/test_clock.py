"""Clock jumps at short counts: timers never early or twice, fencing whatever the clocks say."""

from __future__ import annotations

from reliability import clock


def test_timers_and_fencing_hold_when_the_clock_leaps_an_hour() -> None:
    report = clock.run(short=True)
    assert report.ok, report.failures()
