"""One simulated run of `batchtwin plan`: a configuration at a request rate with a seed, and
the small, picklable result a worker process sends back.

The workload of a run is drawn from (workload flags, rate, seed): every configuration sees the
same requests at a given (rate, seed). `rate=inf` is the saturation probe: PROBE_SCALE times
as many requests, all at t=0, so the engine runs full (the batch limited by KV capacity or
max_running_requests) for a while. `saturation` is the completion rate while it is full: from
the 10th percentile finish time to the last step with a request waiting (the 10th to 90th
percentile finish times when requests never wait that long). A "floor" run has at most
FLOOR_REQUESTS requests: at a low rate latency hardly depends on the run's length.
Goodput = rate x SLO attainment (the fraction of requests meeting the per-request limits);
it avoids the drain tail a finite run adds to `request_throughput`.
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

    def build(self, rate: float, seed: int, vocab_size: int):
        from experiments.cli.workload_flags import workload_spec

        return workload_spec(self).build(vocab_size=vocab_size, seed=seed, rate=rate,
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
    cost_model: str | None = None      # as `simulate`'s: None (roofline), "kernel", a JSON path
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


def simulate_point(spec: PlanSpec, point: Point):
    """The RunResult of one run (raises for bad input)."""
    from sim.run.build import load_model
    from sim.run.simulate import simulate

    _, shape = load_model(spec.model)
    w = spec.workload
    if point.phase == "probe":
        w = dataclasses.replace(w, num_requests=w.num_requests * PROBE_SCALE)
    elif point.phase == "floor":
        w = dataclasses.replace(w, num_requests=min(w.num_requests, FLOOR_REQUESTS))
    workload = w.build(point.rate, point.seed, shape.vocab_size)
    c = point.candidate
    deployment = c.deployment(spec.model, expert_zipf=spec.expert_zipf,
                              cost_model=spec.cost_model, engine_profile=spec.engine_profile)
    return simulate(workload, deployment, c.layout(spec.router), seed=point.seed,
                    slo=spec.slo.per_request(), bounds=False, keep_trace=True)


def run_point(spec: PlanSpec, point: Point) -> PointResult:
    """Run one point; bad input comes back as `error` text (exceptions may not pickle)."""
    try:
        result = simulate_point(spec, point)
    except RUN_ERRORS as e:
        return PointResult(point, error=f"{type(e).__name__}: {e}")
    metrics = point_metrics(result, spec.slo, point.rate)
    missed = spec.slo.violations(result.summary)
    text = [str(v) for v in missed]
    missing = len(result.requests) - int(result.summary["completed"])
    if missing:
        text.insert(0, f"{missing} of {len(result.requests)} requests did not complete")
    return PointResult(point, metrics, tuple(text), tuple(v.objective.key for v in missed))


def point_metrics(result, slo: SLOTargets, rate: float) -> dict[str, float]:
    s = result.summary
    metrics = {k: float(s[k]) for k in SUMMARY_KEYS}
    done = result.completed_requests
    attainment = float(slo.per_request().met(done).sum()) / max(len(result.requests), 1)
    metrics["attainment"] = attainment
    metrics["goodput"] = rate * attainment if math.isfinite(rate) else math.nan
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
