"""The plan's steady-state rule (`experiments.plan.steady_state`): a rate above what the
engine completes is unsustainable whatever the warm-up, a sustainable one settles, and a
probe's run is made longer only up to MAX_SCALE times."""

from __future__ import annotations

import dataclasses
import math

import pytest

from experiments.plan import point as point_module
from experiments.plan.grid import Candidate
from experiments.plan.point import PlanSpec, Point, WorkloadSpec, load_engine, run_point, saturation
from experiments.plan.slo import SLOTargets
from experiments.plan.steady_state import MAX_SCALE, measure
from shared.workload.synthetic import Synthetic
from sim.run.simulate import simulate

KEYS = ("ttft_p90", "tpot_p90")
RUN = {"model": "smollm2-135m", "hardware": "h100", "max_running_requests": 16}


def _run(rate: float, n: int):
    workload = Synthetic(n, 256, 64).build(vocab_size=49152, seed=3, rate=rate)
    return simulate(workload, keep_trace=True, bounds=False, **RUN)


@pytest.fixture(scope="module")
def capacity() -> float:
    """Completions per second of the engine kept full (the plan's saturation probe)."""
    return saturation(_run(math.inf, 600))


@pytest.mark.parametrize("warmup_fraction", [0.0, 0.05, 0.2, 0.45])
def test_a_rate_just_above_saturation_is_unsustainable_however_short_the_warmup(
        capacity, warmup_fraction):
    """At 1.15x the saturation throughput the queue grows over the window beyond a stable
    one's wander, whatever share of the run the warm-up takes; at 0.7x it holds."""
    over = _run(1.15 * capacity, 600)
    window = measure(over, load_engine(over), KEYS, warmup_fraction)
    assert not window.sustainable and window.growth > 0.05
    under = _run(0.7 * capacity, 600)
    assert measure(under, load_engine(under), KEYS, warmup_fraction).sustainable


def test_a_sustainable_rate_settles_and_its_window_leaves_the_warmup_out(capacity):
    """Below saturation the window's halves agree and the window starts after the p90
    lifetime; its statistics are those of the requests that arrived in it."""
    result = _run(0.5 * capacity, 800)
    window = measure(result, load_engine(result), KEYS)
    assert window.settled({"ttft_p90": 10.0, "tpot_p90": 10.0})
    assert window.start >= window.lifetime_p90 and window.end > window.start
    arrived = (result.requests["arrival"] >= window.start).sum()
    assert window.summary["window_requests"] == arrived


def test_the_stopping_rule_ends_at_max_scale_when_the_window_never_settles(monkeypatch):
    """A run whose halves never agree is doubled up to MAX_SCALE times its phase's requests,
    wherever it starts, then judged a miss naming the missing steady state (the loop
    terminates)."""
    spec = PlanSpec("smollm2-135m", WorkloadSpec("synthetic", 20, 64, 8),
                    SLOTargets.parse("ttft_p90=10s"), seeds=(0,))
    scales = []
    real = point_module.simulate_point

    def counted(spec, point, scale=1):
        scales.append(scale)
        return real(spec, point, scale)

    monkeypatch.setattr(point_module, "simulate_point", counted)
    monkeypatch.setattr(point_module.Window, "settled", lambda self, limits: False)
    result = run_point(spec, Point(Candidate("h100", 1, None, None, 1, "fcfs"), 20.0, 0, "search"))
    assert scales == [2 ** i for i in range(MAX_SCALE.bit_length())]
    assert not result.passed and "no steady state" in result.violations[0]
    assert result.metrics["num_requests"] == 20 * MAX_SCALE
    scales.clear()   # a run that starts longer (a settled hint) stops at the same cap
    run_point(spec, Point(Candidate("h100", 1, None, None, 1, "fcfs"), 20.0, 0, "search", 4))
    assert scales == [4, MAX_SCALE]


def test_a_run_that_misses_is_judged_at_once(monkeypatch):
    """A miss in the first window is final: no longer run is made."""
    spec = PlanSpec("smollm2-135m", WorkloadSpec("synthetic", 40, 64, 8),
                    SLOTargets.parse("tpot_p90=1us"), seeds=(0,))
    scales = []
    real = point_module.simulate_point
    monkeypatch.setattr(point_module, "simulate_point",
                        lambda spec, point, scale=1: scales.append(scale) or real(spec, point, scale))
    result = run_point(spec, Point(Candidate("h100", 1, None, None, 1, "fcfs"), 20.0, 0, "search"))
    assert scales == [1] and result.missed == ("tpot_p90",)
    assert dataclasses.asdict(result.point)["phase"] == "search"


@pytest.mark.parametrize(("ttft", "settled"), [((0.70, 0.30), True), ((0.30, 0.70), False),
                                               ((1.90, 1.50), False), ((1.70, 1.85), True),
                                               ((0.3, math.nan), False)])
def test_halves_settle_when_they_agree_or_fall_from_well_under_the_limit(ttft, settled):
    """TTFT near capacity swings between halves: 0.7 s then 0.3 s under a 2 s limit is a
    passed burst, settled; 0.3 s then 0.7 s is a drift toward the limit, not settled; a
    fall from 1.9 s is not well under it; 1.70 against 1.85 agree within 10% of it."""
    from experiments.plan.steady_state import Window

    halves = tuple({"batch": 50.0, "ttft_p90": t} for t in ttft)
    window = Window(10.0, 100.0, {}, halves, 0.0, 0.01, 20.0)
    assert window.settled({"ttft_p90": 2.0}) is settled
