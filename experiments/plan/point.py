"""One simulated run of `batchtwin plan`: a configuration at a request rate with a seed, and
the small, picklable result a worker process sends back.

The workload of a run is drawn from (workload flags, rate, seed): every configuration sees the
same requests at a given (rate, seed). `rate=inf` is the saturation probe: PROBE_SCALE times
as many requests, all at t=0, so the engine runs full (the batch limited by KV capacity or
max_running_requests) for a while. `saturation` is the completion rate while it is full: from
the 10th percentile finish time to the last step with a request waiting (the 10th to 90th
percentile finish times when requests never wait that long). A "floor" run starts at most
FLOOR_REQUESTS requests. Every run but the probe is judged on its steady-state window and
made longer until that settles (`experiments.plan.steady_state`, `run_point`): its metrics
are the window's. Goodput = rate x SLO attainment (the fraction of the window's requests
meeting the per-request limits); it avoids the drain tail a finite run adds to
`request_throughput`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.plan.grid import Candidate
from experiments.plan.limits import load_stats
from experiments.plan.slo import SLOTargets
from experiments.plan.steady_state import MAX_SCALE, Window, measure
from shared.trace.window_summary import completed_rows

if TYPE_CHECKING:
    from sim.cost.engine_profile import EngineProfile

SUMMARY_KEYS = ("completed", "request_throughput", "output_throughput", "num_retractions",
                *(f"{m}_{s}" for m in ("ttft", "tpot", "itl", "e2e")
                  for s in ("mean", "p50", "p90", "p99")))
RUN_ERRORS = (ValueError, TypeError, NotImplementedError, OSError, RuntimeError)
PROBE_SCALE = 3
FLOOR_REQUESTS = 200


@dataclass(frozen=True)
class WorkloadSpec:
    """The workload flags of a plan, by their flag names (those `plan` has no flag for keep
    `simulate`'s defaults). A run's request count scales `num_requests` (module doc), so the
    generator spec (`experiments.cli.workload_flags.workload_spec`) is made per run."""

    workload: str = "sharegpt"
    num_requests: int = 1000
    prompt_len: int | None = None
    output_len: int | None = None
    burstiness: float = 1.0
    num_groups: int = 8
    system_prompt_len: int = 2048
    tenant_zipf: float = 1.0
    turns: int = 4
    think_time: float = 1.0

    def build(self, rate: float, seed: int, vocab_size: int, num_requests: int | None = None):
        """The workload at (rate, seed), of `num_requests` (None: this spec's)."""
        from experiments.cli.workload_flags import workload_spec

        spec = self if num_requests is None else dataclasses.replace(self, num_requests=num_requests)
        return workload_spec(spec).build(vocab_size=vocab_size, seed=seed, rate=rate,
                                         burstiness=self.burstiness)


@dataclass(frozen=True)
class PlanSpec:
    """What every run of a plan shares."""

    model: str
    workload: WorkloadSpec
    slo: SLOTargets
    seeds: tuple[int, ...] = (0, 1)
    rate_tolerance: float = 0.05
    min_rate_fraction: float = 1 / 16
    expert_zipf: float = 0.0           # Zipf exponent of expert popularity (0: uniform)
    cost_model: str | None = None      # as `simulate`'s: None (the kernel model), "roofline", a JSON path
    engine_profile: EngineProfile | None = None   # as `simulate`'s (None: SGLang's)
    router: str = "round_robin"        # the policy in front of a candidate's dp replicas

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("--seeds must be at least 1")
        if not 0 < self.rate_tolerance < 1:
            raise ValueError(f"--rate-tolerance must be in (0, 1), got {self.rate_tolerance}")
        if not 0 < self.min_rate_fraction < 1:
            raise ValueError(f"min_rate_fraction must be in (0, 1), got {self.min_rate_fraction}")


@dataclass(frozen=True)
class Point:
    candidate: Candidate
    rate: float
    seed: int
    phase: str  # "probe", "floor", "search", "curve" or "detail" (module doc)
    scale: int = 1   # the first run's requests, times the phase's (`run_point` doubles them)


@dataclass(frozen=True)
class PointResult:
    point: Point
    metrics: dict[str, float] = field(default_factory=dict)
    violations: tuple[str, ...] = ()  # what missed, as text
    missed: tuple[str, ...] = ()      # the objective keys missed (ttft_p90, ...)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.violations

    def row(self) -> dict[str, Any]:
        """One CSV row: the configuration, the run and its metrics."""
        p = self.point
        return {"phase": p.phase, **p.candidate.to_dict(), "rate": p.rate, "seed": p.seed,
                "passed": self.passed, "violations": "; ".join(self.violations),
                "error": self.error or "", **self.metrics}


def simulate_point(spec: PlanSpec, point: Point, scale: int = 1):
    """The RunResult of one run, `scale` times its phase's requests (raises for bad input)."""
    from sim.run.build import load_model
    from sim.run.simulate import simulate

    _, shape = load_model(spec.model)
    workload = spec.workload.build(point.rate, point.seed, shape.vocab_size,
                                   requests_of(spec, point) * scale)
    c = point.candidate
    deployment = c.deployment(spec.model, expert_zipf=spec.expert_zipf,
                              cost_model=spec.cost_model, engine_profile=spec.engine_profile)
    return simulate(workload, deployment, c.layout(spec.router), seed=point.seed,
                    slo=spec.slo.per_request(), bounds=False, keep_trace=True)


def requests_of(spec: PlanSpec, point: Point) -> int:
    """The requests of a phase's first run (module doc)."""
    n = spec.workload.num_requests
    if point.phase == "probe":
        return n * PROBE_SCALE
    return min(n, FLOOR_REQUESTS) if point.phase == "floor" else n


def run_point(spec: PlanSpec, point: Point) -> PointResult:
    """Run one point: the saturation probe once; any other from `point.scale` times its
    phase's requests, doubled until its window settles (`experiments.plan.steady_state`),
    to at most MAX_SCALE times them (NOTE: the phase's requests, whatever the start). Bad
    input comes back as `error` text (exceptions may not pickle)."""
    scale = point.scale
    while True:
        try:
            result = simulate_point(spec, point, scale)
        except RUN_ERRORS as e:
            return PointResult(point, error=f"{type(e).__name__}: {e}")
        if point.phase == "probe":
            return _judged(spec, point, result, None)
        limits = spec.slo.limits()
        window = measure(result, load_engine(result), tuple(limits))
        judged = _judged(spec, point, result, window)
        if judged.violations or window.settled(limits):
            return judged
        if scale >= max(MAX_SCALE, point.scale):
            return dataclasses.replace(judged, violations=(
                f"no steady state within {len(result.requests)} requests (the window's "
                f"halves still disagree)",), missed=("steady_state",))
        scale *= 2


def _judged(spec: PlanSpec, point: Point, result, window: Window | None) -> PointResult:
    """The run's metrics and what it missed: its window's objectives and growth (the whole
    run's summary for the probe) and any request left unfinished."""
    summary = result.summary if window is None else window.summary
    start, end = (-math.inf, math.inf) if window is None else (window.start, window.end)
    metrics = point_metrics(result, spec.slo, point.rate, summary, start, end)
    metrics["num_requests"] = float(len(result.requests))
    if window is not None:
        metrics.update(window.evidence())
    missed = spec.slo.violations(summary)
    text = [str(v) for v in missed]
    keys = [v.objective.key for v in missed]
    if window is not None and not window.sustainable:
        text.append(f"the queue grew by {window.growth:.1%} of the window's requests: more "
                    f"arrive than the engine serves")
        keys.append("queue_growth")
    missing = len(result.requests) - int(result.summary["completed"])
    if missing:
        text.insert(0, f"{missing} of {len(result.requests)} requests did not complete")
    return PointResult(point, metrics, tuple(text), tuple(keys))


def point_metrics(result, slo: SLOTargets, rate: float, summary: dict[str, Any],
                  start: float = -math.inf, end: float = math.inf) -> dict[str, float]:
    """`summary`'s SUMMARY_KEYS (of the requests that arrived in [start, end]: the window's
    or the whole run's), their attainment and goodput, the saturation throughput and the
    load numbers."""
    metrics = {k: float(summary[k]) for k in SUMMARY_KEYS if k != "num_retractions"}
    metrics["num_retractions"] = float(result.summary["num_retractions"])
    arrival = result.requests["arrival"].to_numpy(dtype=float)
    inside = (arrival >= start) & (arrival <= end)
    met = slo.per_request().met(result.requests[completed_rows(result) & inside])
    metrics["attainment"] = float(met.sum()) / max(int(inside.sum()), 1)
    metrics["goodput"] = rate * metrics["attainment"] if math.isfinite(rate) else math.nan
    metrics["saturation"] = saturation(result)
    metrics.update(load_stats(load_engine(result)))
    return metrics


def load_engine(result):
    """The engine whose load and time series stand for a run: the one engine, a fleet's
    first replica (NOTE: the router spreads the load alike), a disaggregated run's first
    decode instance."""
    roles = {part.role for part in result.parts}
    if not roles:
        return result
    return result.part_result("decode" if "decode" in roles else "replica")


def saturation(result) -> float:
    """Completions per second while the engine runs full (module doc); NaN if none finish."""
    t = np.sort(result.requests["finish_time"].dropna().to_numpy(dtype=float))
    if t.size == 0:
        return math.nan
    steps = result.steps
    waiting = (steps["start_time"] + steps["duration"])[steps["queue_len"] > 0]
    start = t[int(0.1 * t.size)]
    end = float(waiting.max()) if len(waiting) else -math.inf
    if end > start:
        return int(((t > start) & (t <= end)).sum()) / (end - start)
    lo, hi = int(0.1 * t.size), int(0.9 * t.size)
    if t[hi] > t[lo]:
        return (hi - lo) / (t[hi] - t[lo])
    return t.size / t[-1] if t[-1] > 0 else math.nan  # identical requests, one batch
