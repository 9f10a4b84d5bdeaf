"""The operating point a plan recommends: the highest rate, up to the max rate, at which every
objective stays at or under HEADROOM of its limit (the binding percentile at 80% of its
limit), so that a busier hour, a burst or a cost model off by its error band still meets the
SLOs. It is read off the steady-state runs around the max rate (the curve, every seed: the
worst seed counts), linearly interpolated between the two tried rates that bracket it.
The point is also at most HEADROOM of the max rate: near its capacity an engine's queue
waits long at every burst (the waiting time grows as 1 / (1 - utilisation)), so TTFT
turns from flat to over its limit within a few percent of the rate (a knee no
interpolation sees). Where even the lowest rate tried runs an objective above HEADROOM of
its limit there is no point: the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from experiments.plan.point import PointResult
from experiments.plan.slo import SLOTargets

HEADROOM = 0.8
CAPACITY = "capacity"   # the binding limit when HEADROOM of the max rate is the lower


class OperatingPoint(NamedTuple):
    rate: float | None    # req/s; None: even the lowest rate tried runs above HEADROOM
    pressure: float       # the largest value / limit over the objectives and seeds there
    binding: str          # the objective with that ratio ("tpot_p90")


def pressure(results: Sequence[PointResult], slo: SLOTargets) -> tuple[float, str]:
    """(largest value / limit, its objective) over `results` (NaN counts as infinite)."""
    worst = (-math.inf, "")
    for r in results:
        for o in slo.objectives:
            value = r.metrics.get(o.key, math.nan)
            ratio = value / o.limit if math.isfinite(value) else math.inf
            worst = max(worst, (ratio, o.key))
    return worst


def recommend(runs: Sequence[PointResult], max_rate: float, slo: SLOTargets,
              headroom: float = HEADROOM) -> OperatingPoint:
    """The operating point (module doc) from `runs` at rates up to `max_rate`: at most
    `headroom` of the max rate, lower where an objective reaches `headroom` of its limit
    first."""
    point = _by_objectives(runs, max_rate, slo, headroom)
    if point.rate is not None and point.rate > headroom * max_rate:
        return OperatingPoint(headroom * max_rate, headroom, CAPACITY)
    return point


def _by_objectives(runs: Sequence[PointResult], max_rate: float, slo: SLOTargets,
                   headroom: float) -> OperatingPoint:
    by_rate: dict[float, list[PointResult]] = {}
    for r in runs:
        if r.point.rate <= max_rate * (1 + 1e-9):
            by_rate.setdefault(r.point.rate, []).append(r)
    tried = sorted((rate, *pressure(rs, slo), all(r.passed for r in rs))
                   for rate, rs in by_rate.items())
    below = [t for t in tried if t[1] <= headroom and t[3]]
    if not below:
        first = tried[0] if tried else (math.nan, math.inf, "", False)
        return OperatingPoint(None, first[1], first[2])
    rate, ratio, key, _ = below[-1]
    above = [t for t in tried if t[0] > rate]
    if above and math.isfinite(above[0][1]) and above[0][1] > headroom:
        r2, p2 = above[0][0], above[0][1]
        rate = rate + (headroom - ratio) * (r2 - rate) / (p2 - ratio)
        ratio, key = headroom, above[0][2]
    return OperatingPoint(rate, ratio, key)
