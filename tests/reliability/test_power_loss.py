"""Power loss at short counts: no acknowledged step lost under synchronous=full, only the
latest ones under normal, never one in the middle; and the hole detector itself."""

from __future__ import annotations

import pytest

from reliability import power_loss
from reliability.power_loss import Acks, lost_in_middle

pytestmark = pytest.mark.crash


def test_power_loss_meets_its_targets() -> None:
    report = power_loss.run(short=True)
    assert report.ok, report.failures()


def acks(*pairs: tuple[str, int]) -> Acks:
    """Acknowledgements of (run, step) in this order."""
    return Acks.parse(f"ack {run} {number}" for run, number in pairs)


def test_a_lost_suffix_is_not_a_hole() -> None:
    order = acks(("a", 1), ("b", 1), ("a", 2), ("b", 2))
    assert lost_in_middle(order, {"a": {1}, "b": {1}}) == 0
    assert lost_in_middle(order, {}) == 0


def test_a_step_lost_before_a_surviving_later_one_is_a_hole() -> None:
    order = acks(("a", 1), ("a", 2), ("a", 3))
    assert lost_in_middle(order, {"a": {1, 3}}) == 1
    # Across runs: b's step 2 began after a's step 1 was acknowledged, and survived it.
    order = acks(("a", 1), ("b", 1), ("b", 2))
    assert lost_in_middle(order, {"b": {1, 2}}) == 1
    # b's step 2 began before a's step 1 was acknowledged: their commits may be in any order.
    order = acks(("b", 1), ("a", 1), ("b", 2))
    assert lost_in_middle(order, {"b": {1, 2}}) == 0
    # b's step 1 may have been committed before a's step 1: no hole.
    assert lost_in_middle(acks(("a", 1), ("b", 1)), {"b": {1}}) == 0
