"""The largest request rate at which a configuration meets the SLOs.

Per configuration: a saturation probe (every request at t=0) gives the most requests per
second it completes when full, S. Above S the queue of a long run grows without bound (a
finite run hides that), so S caps the search. The search tries S; if that misses, a short
floor run (FLOOR_REQUESTS requests at `min_rate_fraction * S`, a lightly loaded engine)
tells whether any rate can pass: if it misses too, the configuration is infeasible. Else the
search halves from S until a rate passes, then bisects (geometric mean) between the highest
passing and lowest failing rate until they are within `rate_tolerance`. A rate passes when
the run of every seed meets every objective in its steady-state window and completes every
request (`experiments.plan.steady_state`); the other seeds run only when the first passes,
and a configuration's search runs start as long as its last passing run needed to settle.
All configurations advance together, one round of runs at a time, so the pool stays busy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm import tqdm

from experiments.plan.grid import Candidate
from experiments.plan.limits import Limit, diagnose, floor_limit, saturated_limit
from experiments.plan.point import PlanSpec, Point, PointResult
from experiments.plan.pool import PointPool
from experiments.plan.slo import SLOTargets

CURVE_FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.1, 1.25, 1.5)  # of the found rate (1.0 is reused)


@dataclass
class RateSearch:
    """Bracket-and-bisect state for one configuration (module doc); rates in req/s."""

    saturation: float
    tolerance: float
    min_fraction: float
    passed: float | None = None   # highest rate that met the SLOs
    failed: float | None = None   # lowest rate that missed them
    floor: bool | None = None     # whether the floor run passed (None: not run)

    @property
    def floor_rate(self) -> float:
        return self.saturation * self.min_fraction

    def next_point(self) -> tuple[float, str] | None:
        """(rate, phase) to run next, or None when the search is over."""
        if self.failed is None:
            return (self.saturation, "search") if self.passed is None else None
        if self.passed is None:
            if self.floor is None:
                return self.floor_rate, "floor"
            rate = self.failed / 2
            ok = self.floor and rate >= self.floor_rate * (1 - 1e-9)
            return (rate, "search") if ok else None
        if self.failed <= self.passed * (1 + self.tolerance):
            return None
        return math.sqrt(self.passed * self.failed), "search"

    def record(self, rate: float, phase: str, passed: bool) -> None:
        if phase == "floor":
            self.floor = passed
        elif passed:
            self.passed = max(rate, self.passed or rate)
        else:
            self.failed = min(rate, self.failed or rate)


@dataclass(frozen=True)
class Outcome:
    """A configuration's search result; `at_rate`/`at_failed`: the seed runs at those rates."""

    candidate: Candidate
    saturation: float
    rate: float | None
    failed_rate: float | None
    probe: PointResult
    at_rate: tuple[PointResult, ...]
    at_failed: tuple[PointResult, ...]
    limit: Limit

    @property
    def feasible(self) -> bool:
        return self.rate is not None

    @property
    def capped(self) -> bool:
        """Met the SLOs at the saturation throughput (the search's ceiling)."""
        return self.feasible and self.failed_rate is None

    @property
    def goodput(self) -> float:
        """Mean over seeds of rate x attainment at `rate` (0 when infeasible)."""
        if not self.at_rate:
            return 0.0
        return sum(r.metrics["goodput"] for r in self.at_rate) / len(self.at_rate)

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput / self.candidate.num_gpus

    def worst(self, key: str) -> float:
        """The largest value of a metric over the seeds at `rate`."""
        return max((r.metrics[key] for r in self.at_rate), default=math.nan)


def search_rates(spec: PlanSpec, candidates: Sequence[Candidate], pool: PointPool,
                 bar: tqdm) -> tuple[list[Outcome], list[PointResult]]:
    """Every candidate's Outcome (in order) and every run made. ValueError on a failed run."""
    probes = _checked(pool.run([Point(c, math.inf, spec.seeds[0], "probe")
                                for c in candidates], bar))
    searches = {c: RateSearch(_saturation(p), spec.rate_tolerance, spec.min_rate_fraction)
                for c, p in zip(candidates, probes, strict=True)}
    runs: dict[Candidate, dict[float, tuple[PointResult, ...]]] = {c: {} for c in candidates}
    scales = dict.fromkeys(candidates, 1)   # NOTE: where the next search run starts (settled_scale)
    done = list(probes)
    while todo := [(c, *p) for c, s in searches.items() if (p := s.next_point()) is not None]:
        groups = _seed_groups(spec, pool, bar, [Point(c, r, spec.seeds[0], phase, scales[c]
                                                      if phase == "search" else 1)
                                                for c, r, phase in todo])
        for (c, r, phase), group in zip(todo, groups, strict=True):
            done += group
            runs[c][r] = group
            searches[c].record(r, phase, all(g.passed for g in group))
            scales[c] = settled_scale(spec, group, scales[c])
    outcomes = [_outcome(c, p, searches[c], runs[c])
                for c, p in zip(candidates, probes, strict=True)]
    return outcomes, done


def _seed_groups(spec: PlanSpec, pool: PointPool, bar: tqdm,
                 firsts: list[Point]) -> list[tuple[PointResult, ...]]:
    """Each point's runs: its first seed's, then, only where that passed, the other seeds'
    (a rate passes when every seed does: one miss decides it)."""
    first = _checked(pool.run(firsts, bar))
    passed = [i for i, r in enumerate(first) if r.passed]
    more = _checked(pool.run([dataclasses.replace(firsts[i], seed=seed) for i in passed
                              for seed in spec.seeds[1:]], bar))
    groups = [(r,) for r in first]
    n = len(spec.seeds) - 1
    for j, i in enumerate(passed):
        groups[i] = (first[i], *more[j * n:(j + 1) * n])
    return groups


def settled_scale(spec: PlanSpec, group: Sequence[PointResult], scale: int) -> int:
    """Where a configuration's next search runs start: the fewest requests (as a multiple of
    --num-requests) that a passing search run of it needed to settle, once one has (a
    bisection near the max rate needs about as long a run as the rate before it)."""
    settled = [int(r.metrics["num_requests"]) // spec.workload.num_requests for r in group
               if r.passed and r.point.phase == "search"]
    return max(1, min(settled)) if settled else scale


def rank(outcomes: Sequence[Outcome], slo: SLOTargets) -> list[Outcome]:
    """Feasible configurations by goodput per GPU (3 significant digits, highest first), ties
    and infeasible ones by how close they run to the limits (the largest value / limit)."""
    def key(o: Outcome) -> tuple[bool, float, float]:
        runs = o.at_rate or o.at_failed
        pressure = max(_finite(r.metrics[ob.key]) / ob.limit for r in runs
                       for ob in slo.objectives)
        return not o.feasible, -float(f"{o.goodput_per_gpu:.3g}"), pressure

    return sorted(outcomes, key=key)


def curve_points(spec: PlanSpec, outcome: Outcome) -> list[Point]:
    """Runs around the found rate for the latency-rate curves, on the first seed (the found
    rate has every seed's), each starting as long as the runs at the found rate settled."""
    assert outcome.rate is not None
    scale = settled_scale(spec, outcome.at_rate, 1)
    return [Point(outcome.candidate, outcome.rate * f, spec.seeds[0], "curve", scale)
            for f in CURVE_FRACTIONS]


def _finite(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _checked(results: list[PointResult]) -> list[PointResult]:
    for r in results:
        if r.error is not None:
            raise ValueError(f"{r.point.candidate.label}: {r.error}")
    return results


def _saturation(probe: PointResult) -> float:
    s = probe.metrics["saturation"]
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"{probe.point.candidate.label}: the saturation probe completed too "
                         f"few requests to measure a throughput (use more --num-requests)")
    return s


def _outcome(c: Candidate, probe: PointResult, s: RateSearch,
             runs: dict[float, tuple[PointResult, ...]]) -> Outcome:
    if s.passed is None:  # infeasible: report the lowest rate run
        failed = min(runs)
        first = next(r for r in runs[failed] if not r.passed)
        return Outcome(c, s.saturation, None, failed, probe, (), runs[failed],
                       floor_limit(failed, first.violations))
    at_rate = runs[s.passed]
    if s.failed is None:
        return Outcome(c, s.saturation, s.passed, None, probe, at_rate, (),
                       saturated_limit(probe.metrics, s.saturation))
    at_failed = runs[s.failed]
    first = next(r for r in at_failed if not r.passed)
    limit = diagnose(first.metrics, tuple(k.split("_")[0] for k in first.missed))
    return Outcome(c, s.saturation, s.passed, s.failed, probe, at_rate, at_failed, limit)
