"""The largest request rate at which a configuration meets the SLOs.

Per configuration: a saturation probe (every request at t=0) gives the most requests per
second it completes when full, S. Above S the queue of a long run grows without bound (a
finite run hides that), so S caps the search. The search tries S; if that misses, a short
floor run (FLOOR_REQUESTS requests at `min_rate_fraction * S`, a lightly loaded engine)
tells whether any rate can pass: if it misses too, the configuration is infeasible. Else the
search halves from S until a rate passes, then bisects (geometric mean) between the highest
passing and lowest failing rate until they are within `rate_tolerance`. A run whose queue
grew is saturated: it served at most λ·(1 - growth + wander) requests per second (the growth
test's slope and its 3 standard errors, `experiments.plan.steady_state`), and no rate above
that throughput is sustainable (Kleinrock's λ < μ), so it becomes the search's ceiling: the
next rate tried below a saturated miss is just under its throughput (by `rate_tolerance`),
not half its rate, and each further miss doubles that step down (in log rate, up to
halving: a galloping search); the bisection's upper end is the lower of the lowest failing
rate and the ceiling.

A rate passes when the run of every seed meets every objective in its steady-state window
and completes every request (`experiments.plan.steady_state`). The search runs on the first
seed; the other seeds run only at the rate it ends on, and a miss there makes that rate the
lowest failing one and the search goes on below it, every seed at every rate (as every
search does from the start when the pool has more workers than configurations). A
configuration's search runs start as long as its last passing run needed to settle.
Each configuration runs its next point as soon as its last is back, so the pool stays busy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    passes: list[float] = field(default_factory=list)   # the rates that met the SLOs
    failed: float | None = None   # lowest rate that missed them
    floor: bool | None = None     # whether the floor run passed (None: not run)
    ceiling: float = math.inf     # the lowest throughput a saturated miss served (module doc)
    every_seed: bool = False      # each rate runs on every seed (after another seed's miss)
    drop: float = 2.0             # the next step down while nothing has passed (module doc)

    @property
    def passed(self) -> float | None:
        """The highest rate that met the SLOs, below the lowest that missed (a rate the
        first seed passed and another missed counts as missed)."""
        return max((r for r in self.passes if self.failed is None or r < self.failed), default=None)

    @property
    def floor_rate(self) -> float:
        return self.saturation * self.min_fraction

    @property
    def upper(self) -> float | None:
        """The lowest rate known to miss: the lowest failing rate or the ceiling below it
        (NOTE: a ceiling at or under a passing rate is the throughput estimate's noise, and
        is not used)."""
        if self.failed is None:
            return None
        passed = self.passed
        if passed is not None and self.ceiling <= passed:
            return self.failed
        return min(self.failed, self.ceiling)

    def next_point(self) -> tuple[float, str] | None:
        """(rate, phase) to run next, or None when the search is over."""
        upper, passed = self.upper, self.passed
        if upper is None:
            return (self.saturation, "search") if passed is None else None
        if passed is None:
            if self.floor is None:
                return self.floor_rate, "floor"
            rate = upper / self.drop
            ok = self.floor and rate >= self.floor_rate * (1 - 1e-9)
            return (rate, "search") if ok else None
        if upper <= passed * (1 + self.tolerance):
            return None
        return math.sqrt(passed * upper), "search"

    def record(self, rate: float, phase: str, passed: bool, served: float = math.inf) -> None:
        """A run's verdict; `served`: the throughput of a saturated miss (module doc)."""
        if phase == "floor":
            self.floor = passed
        elif passed:
            self.passes.append(rate)
        else:
            self.failed = min(rate, self.failed or rate)
            lower = served < min(self.ceiling, self.failed)
            self.ceiling = min(self.ceiling, served)
            self.drop = 1 + self.tolerance if lower else min(self.drop ** 2, 2.0)

    def missed_on_another_seed(self, rate: float, served: float, verified: set[float]) -> None:
        """The first seed passed `rate` and another missed: it fails, only the `verified`
        passes (every seed's) still count, and every rate from here runs on every seed."""
        self.record(rate, "search", False, served)
        self.passes = [r for r in self.passes if r in verified]
        self.every_seed = True


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
    """Every candidate's Outcome (in order) and every run made (the probes, then each
    configuration's runs in the order it made them). ValueError on a failed run.
    NOTE: each configuration's next run starts as soon as its last one is back (the pool's
    `stream`), so a configuration's long run never holds the others up; a configuration's
    runs still follow one another, so its outcome does not depend on the completion order."""
    probes = _checked(pool.run([Point(c, math.inf, spec.seeds[0], "probe")
                                for c in candidates], bar))
    every_seed = len(candidates) < pool.jobs   # NOTE: idle workers run the other seeds at once
    configs = {c: _Configuration(spec, RateSearch(_saturation(p), spec.rate_tolerance,
                                                  spec.min_rate_fraction, every_seed=every_seed))
               for c, p in zip(candidates, probes, strict=True)}
    firsts = [p for c, config in configs.items() for p in config.next_points(c)]
    pool.stream(firsts, lambda r: configs[r.point.candidate].take(_checked([r])[0]), bar)
    outcomes = [_outcome(c, p, configs[c].search, configs[c].runs)
                for c, p in zip(candidates, probes, strict=True)]
    return outcomes, [*probes, *(r for config in configs.values() for r in config.made)]


@dataclass
class _Configuration:
    """One configuration's search as its runs come back: the RateSearch, its runs by rate,
    where its next search run starts (`settled_scale`) and the runs of the rate in flight."""

    spec: PlanSpec
    search: RateSearch
    runs: dict[float, tuple[PointResult, ...]] = field(default_factory=dict)
    scale: int = 1
    made: list[PointResult] = field(default_factory=list)
    back: list[PointResult] = field(default_factory=list)
    expected: int = 0

    def next_points(self, c: Candidate) -> list[Point]:
        """The search's next rate on the first seed, or, once the search is over, its max
        rate on the other seeds (a rate passes when every seed does; the other seeds run
        only at the rate that would be the answer; a miss there makes the search go on below
        it with every seed)."""
        seeds, s = self.spec.seeds, self.search
        step, passed = s.next_point(), s.passed
        if step is not None:
            rate, phase = step
            points = [Point(c, rate, seed, phase, self.scale if phase == "search" else 1)
                      for seed in (seeds if s.every_seed and phase == "search" else seeds[:1])]
        elif passed is not None and len(self.runs[passed]) < len(seeds):
            points = [Point(c, passed, seed, "search", self.scale) for seed in seeds[1:]]
        else:
            points = []
        self.expected = len(points)
        return points

    def take(self, result: PointResult) -> list[Point]:
        """A run back from the pool; once its rate's runs are all back, they are recorded
        and the next points returned."""
        self.made.append(result)
        self.back.append(result)
        if len(self.back) < self.expected:
            return []
        group = sorted(self.back, key=lambda r: self.spec.seeds.index(r.point.seed))
        self.back = []
        self._record(group)
        self.scale = settled_scale(self.spec, group, self.scale)
        return self.next_points(result.point.candidate)

    def _record(self, group: list[PointResult]) -> None:
        point, seeds = group[0].point, self.spec.seeds
        self.runs[point.rate] = self.runs.get(point.rate, ()) + tuple(group)
        passed = all(r.passed for r in group)
        if point.seed == seeds[0]:
            self.search.record(point.rate, point.phase, passed, served(group))
        elif not passed:
            verified = {r for r, g in self.runs.items()
                        if len(g) == len(seeds) and all(x.passed for x in g)}
            self.search.missed_on_another_seed(point.rate, served(group), verified)


def served(group: Sequence[PointResult]) -> float:
    """The lowest throughput a saturated run of the group served (req/s, at most its rate x
    (1 - queue growth + wander)); inf when none grew its queue (module doc)."""
    return min((r.point.rate * (1 - r.metrics["queue_growth"] + r.metrics["queue_wander"])
                for r in group if "queue_growth" in r.missed), default=math.inf)


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
