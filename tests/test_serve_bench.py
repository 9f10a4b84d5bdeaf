"""`batchtwin bench serve` against the simulated server (in a process of its own, as a
benchmark client meets a server, at real time): the mock is the simulator, checked without
reading a clock.

- the engine: the trace the server saves is the simulator's at the server's arrivals: a
  teacher-forced replay (`sim.run.replay`) re-schedules every recorded step identically from the
  recorded arrivals and step start times, and every step lasts exactly the cost model's price;
- the answers: every request gets all its tokens, and no client sees its first token before
  the server's own trace says it was sampled (the client's TTFT median is at least the
  server's: the HTTP path only adds time).

How much the HTTP path adds, and how close the client's latencies come to the simulator's, are
timings of the host: `python -m experiments.bench.bench_serve_mock --separate-process` measures
them (a test must pass on a loaded 2-core host).
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

import statistics

from experiments.bench.bench_serve_mock import free_port, measure, subprocess_server
from shared import Trace
from sim.run.replay import replay

RATE, PROMPTS, INPUT, OUTPUT = 8.0, 30, 256, 64
FLOAT_EPS = 1e-9   # relative: a step's price computed twice in the same float operations


def test_the_mocks_trace_is_the_simulators_schedule_at_the_cost_models_prices(tmp_path):
    """Driven over HTTP at real time, the simulated server answers every request in full, its
    trace replays step for step with each step at the cost model's price, and the client's
    TTFT median is never below the server's."""
    port, saved = free_port(), tmp_path / "trace.jsonl"
    stop = subprocess_server(port, 1.0, ["--trace-out", str(saved)])
    try:
        measured, _ = measure(f"http://127.0.0.1:{port}", 1.0, PROMPTS, RATE, INPUT, OUTPUT)
    finally:
        stop()
    assert measured["completed"] == PROMPTS and measured["failed"] == 0
    assert measured["total_output_tokens"] == PROMPTS * OUTPUT
    trace = Trace.load(saved)
    assert sorted(r.output_len for r in trace.requests.values()) == [OUTPUT] * PROMPTS
    result = replay(trace)
    assert result.agree_fraction == 1.0 and result.first_divergence is None
    assert result.mape <= FLOAT_EPS
    served = statistics.median(r.first_token_time - r.arrival_time for r in trace.requests.values())
    assert measured["median_ttft_ms"] >= served * 1e3 * (1 - FLOAT_EPS)
