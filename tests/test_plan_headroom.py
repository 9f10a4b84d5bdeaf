"""The recommended operating point (`experiments.plan.headroom`)."""

from __future__ import annotations

import pytest

from experiments.plan.grid import Candidate
from experiments.plan.headroom import CAPACITY, recommend
from experiments.plan.point import Point, PointResult
from experiments.plan.slo import SLOTargets

SLO = SLOTargets.parse("ttft_p90=2s,tpot_p90=100ms")
CANDIDATE = Candidate("h100", 1, None, None, 1, "fcfs")


def _run(rate: float, tpot: float, ttft: float = 0.1, seed: int = 0) -> PointResult:
    return PointResult(Point(CANDIDATE, rate, seed, "curve"),
                       {"tpot_p90": tpot, "ttft_p90": ttft})


def test_the_point_is_where_the_binding_objective_reaches_80_percent_of_its_limit():
    """Between the tried rates around it, linearly; the worst seed counts."""
    runs = [_run(10, 0.05), _run(20, 0.06), _run(20, 0.07, seed=1), _run(25, 0.09), _run(30, 0.095)]
    point = recommend(runs, 30, SLO)
    assert point.rate == pytest.approx(22.5) and point.binding == "tpot_p90"
    assert point.pressure == pytest.approx(0.8)


def test_the_point_is_at_most_80_percent_of_the_max_rate():
    """Objectives far from their limits at the max rate (a TTFT knee just above it): the
    point is 80% of the max rate."""
    runs = [_run(15, 0.02), _run(30, 0.03)]
    point = recommend(runs, 30, SLO)
    assert (point.rate, point.binding) == (pytest.approx(24.0), CAPACITY)


def test_no_rate_under_80_percent_of_a_limit_means_no_recommended_point():
    """Even the lowest tried rate runs an objective above 80% of its limit: no point."""
    point = recommend([_run(10, 0.09), _run(20, 0.095)], 20, SLO)
    assert point.rate is None and point.binding == "tpot_p90"
    assert point.pressure == pytest.approx(0.9)
