"""The suite's verdict on one trace: where HTDA is below the best baseline, and how much of the gap to the bound
it closes."""

from __future__ import annotations

import pytest

from htda.simulator.suite import TraceVerdict


def test_a_size_with_a_tiny_gap_swings_the_mean_share_but_not_the_summed_one():
    # (fraction, htda, best baseline, its ratio, bound): half the gap closed at 1 %, 0.004 lost where the gap is 0.002
    verdict = TraceVerdict("t", [(0.01, 0.30, "lru", 0.20, 0.40), (0.5, 0.896, "arc", 0.900, 0.902)])
    assert verdict.gap_closed == pytest.approx((0.5 - 2.0) / 2)
    assert verdict.summed_gap_closed == pytest.approx((0.10 - 0.004) / (0.20 + 0.002))
    assert not verdict.wins_everywhere


def test_without_a_gap_there_is_no_summed_share():
    verdict = TraceVerdict("t", [(0.01, 0.33, "lru", 0.33, 0.33)])
    assert verdict.summed_gap_closed is None and verdict.gap_closed == 0.0 and verdict.wins_everywhere
