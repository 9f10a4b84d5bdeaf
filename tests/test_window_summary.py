"""`shared.trace.window_summary`: a run's summary over the requests of a window."""

from __future__ import annotations

import math

import pytest

from shared.trace.run_result import LATENCY_METRICS
from shared.trace.window_summary import window_summary
from shared.workload.synthetic import Synthetic
from sim.fleet.fleet_layout import Fleet
from sim.run.simulate import simulate

KEYS = [f"{m}_{s}" for m in LATENCY_METRICS for s in ("mean", "p50", "p90", "p99")]


@pytest.mark.parametrize("layout", [None, Fleet(2)])
def test_a_window_from_the_first_arrival_is_the_whole_runs_summary(layout):
    """From t=0 on every request is in the window: its numbers are the run's own (one
    engine or a fleet, ITL pooled over every engine's trace)."""
    workload = Synthetic(60, 128, 32).build(vocab_size=49152, seed=4, rate=40.0)
    result = simulate(workload, model="smollm2-135m", layout=layout, keep_trace=True)
    window = window_summary(result, 0.0)
    assert window["window_requests"] == 60
    for key in (*KEYS, "completed", "request_throughput", "output_throughput"):
        assert window[key] == pytest.approx(result.summary[key], rel=1e-12), key


def test_a_later_window_counts_only_the_requests_that_arrived_in_it():
    """From a time on: the requests arriving then or later, their TTFT percentiles; without
    itl the ITL statistics are NaN."""
    workload = Synthetic(60, 128, 32).build(vocab_size=49152, seed=4, rate=40.0)
    result = simulate(workload, model="smollm2-135m", keep_trace=True)
    start = float(result.requests["arrival"].iloc[20])
    window = window_summary(result, start, itl=False)
    inside = result.requests[result.requests["arrival"] >= start]
    assert window["window_requests"] == len(inside) == 40
    assert window["ttft_p90"] == pytest.approx(float(inside["ttft"].quantile(0.9)))
    assert math.isnan(window["itl_p50"])
