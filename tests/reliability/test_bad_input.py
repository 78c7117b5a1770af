"""The bad-input scenario at short counts: every target met, nothing untyped, nothing written."""

from __future__ import annotations

from reliability import bad_input


def test_bad_input_meets_every_target() -> None:
    report = bad_input.run(short=True)
    assert report.ok, [*report.failures(), *report.notes]
