"""Steady state for a rate probe: the warm-up left out, the measurement window, the growth
test and the stopping rule.

A run starts with an empty engine, so its first requests see a small running batch and no
queue; a short run at a rate the engine cannot sustain ends before its queue and batch have
grown, and looks sustainable. So a probe at rate λ is judged on a window:

- **Warm-up**: the requests that arrived before t_w = max(WARMUP_FRACTION of the arrival
  span, the p90 request lifetime): by then nine in ten of the requests in the batch at
  the start have been replaced (the transient of a queue lasts about one residence time;
  the heavy tail's last tenth is what the halves' agreement below checks). They are
  served, not measured.
  (At most half the span: a run whose requests outlive it still gets a window, unsettled.)
- **Window**: the requests that arrived in [t_w, last arrival]; the SLO statistics are
  theirs (`shared.trace.window_summary`).
- **Growth test** (a queue is stable only when λ < μ, its completion rate; above it the
  queue grows as (λ - μ)·t: Kleinrock, *Queueing Systems* vol. 1, §1.3): the queue
  (requests arrived and still waiting for their first token, every engine) over the
  window, its least-squares slope as a fraction of the arrival rate. Above
  GROWTH_TOLERANCE, and beyond 3 standard errors of the slope (`queue_trend`: a stable
  queue wanders, correlated over about a request's lifetime), while the running batch
  holds steady, the rate is unsustainable, whatever its percentiles say; the warm-up's
  length does not enter. Above GROWTH_TOLERANCE but within the wander, or with the batch
  still growing, the run is not settled: it is made longer.
  NOTE: the queue, not the whole backlog (arrived, not finished): an empty engine's backlog
  ramps up for as long as its longest requests live (by λ·P(lifetime > t) at time t), so
  after a p90-lifetime warm-up a heavy-tailed workload's backlog still grows by several
  percent of the arrivals at a sustainable rate (a 4-replica fleet at a third of its
  capacity read 10.6%). Requests in the running batch are served, not queued; a batch that
  grows without a cap shows in the batch test and in the latency halves.
- **Stopping rule** (a run is long enough when its answer has settled, as in batch-means
  output analysis: Law, *Simulation Modeling and Analysis*, §9.5): the window's two halves
  (by arrival) agree on every objective within CONVERGENCE_TOLERANCE of its limit (or the
  second is lower, the first that far under the limit: a passed burst) and on
  the mean running batch within that fraction of it (plus one request), the queue holds
  within GROWTH_TOLERANCE, and the window spans at least
  LIFETIMES p90 lifetimes. Otherwise the run is repeated with twice the requests, up to
  MAX_SCALE times the plan's `--num-requests`.

A run that misses an objective or fails the growth test is conclusive at once (a longer
run only adds load); a pass needs a settled window. A pass that never settles is a miss.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from shared.trace.window_summary import window_summary

WARMUP_FRACTION = 0.2
LIFETIMES = 1.0
LIFETIME_PERCENTILE = 90   # NOTE: ShareGPT-like lengths are heavy-tailed: the p99 is ~3x the p90
TREND_SAMPLES = 256
CONVERGENCE_TOLERANCE = 0.1
GROWTH_TOLERANCE = 0.03
MAX_SCALE = 8


class Window(NamedTuple):
    """A run's measurement window and the evidence that it is steady (module doc)."""

    start: float                 # t_w: the warm-up's end (s)
    end: float                   # the last arrival (s)
    summary: dict[str, Any]      # window_summary over [start, end]
    halves: tuple[dict[str, float], dict[str, float]]   # objectives and mean batch per half
    growth: float                # the queue's slope over the window / its arrival rate
    wander: float                # 3 standard errors of that slope, the same fraction
    lifetime_p90: float          # p90 of the requests' E2E (s)

    @property
    def batch_steady(self) -> bool:
        """The halves' mean running batch agree (within CONVERGENCE_TOLERANCE, plus one
        request: a small batch's mean wanders by that)."""
        first, second = (h["batch"] for h in self.halves)
        return abs(first - second) <= CONVERGENCE_TOLERANCE * max(first, second) + 1

    @property
    def sustainable(self) -> bool:
        """False when the queue grows beyond the tolerance and its wander while the batch
        holds steady (a batch still filling up may queue requests too: that run is made
        longer, not judged)."""
        return self.growth <= max(GROWTH_TOLERANCE, self.wander) or not self.batch_steady

    def settled(self, limits: dict[str, float]) -> bool:
        """The halves agree (module doc), the queue holds within GROWTH_TOLERANCE and the
        window spans LIFETIMES p90 lifetimes."""
        first, second = self.halves
        if not (self.end - self.start >= LIFETIMES * self.lifetime_p90
                and self.growth <= GROWTH_TOLERANCE and self.batch_steady):
            return False
        return all(_agree(first[k], second[k], limit) for k, limit in limits.items())

    def evidence(self) -> dict[str, float]:
        """Flat metrics for the run's row (`window_*`, `half1_*`, `half2_*`)."""
        first, second = self.halves
        return {"warmup_s": self.start, "window_s": self.end - self.start,
                "window_requests": float(self.summary["window_requests"]),
                "queue_growth": self.growth, "queue_wander": self.wander,
                "lifetime_p90": self.lifetime_p90,
                **{f"half1_{k}": v for k, v in first.items()},
                **{f"half2_{k}": v for k, v in second.items()}}


def measure(result: Any, engine: Any, keys: tuple[str, ...],
            warmup_fraction: float = WARMUP_FRACTION) -> Window:
    """The window of `result` (its engine `engine` for the running batch), the halves read
    on the objective `keys` (e.g. "tpot_p90"); the warm-up at least `warmup_fraction` of
    the arrivals' span (module doc)."""
    requests = result.requests
    arrival = requests["arrival"].to_numpy(dtype=float)
    first = requests["first_token_time"].to_numpy(dtype=float)
    finish = requests["finish_time"].to_numpy(dtype=float)
    end = float(arrival.max())
    lifetime = float(np.nanpercentile(finish - arrival, LIFETIME_PERCENTILE)) if np.isfinite(finish).any() else math.inf
    start = min(max(warmup_fraction * end, lifetime), end / 2)   # NOTE: a window, if not a settled one
    mid = (start + end) / 2
    halves = (_half(result, engine, start, mid, keys), _half(result, engine, mid, end, keys))
    growth, wander = queue_trend(arrival, first, finish, start, end)
    return Window(start, end, window_summary(result, start, end), halves, growth, wander, lifetime)


def _half(result: Any, engine: Any, start: float, end: float,
          keys: tuple[str, ...]) -> dict[str, float]:
    summary = window_summary(result, start, end, itl=any(k.startswith("itl") for k in keys))
    steps = engine.steps
    t = steps["start_time"].to_numpy(dtype=float)
    inside = (t >= start) & (t < end)
    batch = float(steps["batch_size"].to_numpy(dtype=float)[inside].mean()) if inside.any() else 0.0
    return {"batch": batch, **{k: float(summary[k]) for k in keys}}


def queue_trend(arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, start: float,
                end: float) -> tuple[float, float]:
    """(growth, wander): the queue's least-squares slope over [start, end] (requests arrived
    and without their first token, every engine, sampled at TREND_SAMPLES times) as a
    fraction of the window's arrival rate, and 3 standard errors of that slope, the same
    fraction. A stable queue is correlated over about a request's lifetime, so the slope's
    standard error counts one independent sample per mean lifetime (at least 2)."""
    span = max(end - start, 1e-12)
    inside = (arrival >= start) & (arrival <= end)
    rate = max(int(inside.sum()), 1) / span
    t = np.linspace(start, end, TREND_SAMPLES)                                  # [S]
    served = np.sort(np.where(np.isnan(first), np.inf, first))
    queue = np.searchsorted(np.sort(arrival), t, "right") - np.searchsorted(served, t, "right")
    slope, intercept = np.polyfit(t, queue.astype(float), 1)
    spread = float((queue - (slope * t + intercept)).std())
    life = np.where(np.isnan(finish), end, finish)[inside] - arrival[inside]
    lifetime = float(life.mean()) if life.size else span
    independent = max(span / max(lifetime, span / TREND_SAMPLES), 2.0)
    error = spread * math.sqrt(12) / (span * math.sqrt(independent))
    return float(slope) / rate, 3 * error / rate


def _agree(first: float, second: float, limit: float) -> bool:
    """Two halves' values of an objective agree: within CONVERGENCE_TOLERANCE of its limit
    of each other, or falling from a first half that far under it (a queue near its
    capacity swings TTFT between halves: a burst early in the window that has passed leaves
    the verdict as it is; a rise is a drift toward the limit, and the run is made longer).
    NaN: no."""
    tolerance = CONVERGENCE_TOLERANCE * limit
    if math.isnan(first) or math.isnan(second):
        return False
    return abs(second - first) <= tolerance or second <= first <= limit - tolerance
