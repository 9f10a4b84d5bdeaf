"""`batchtwin bench serve` against the simulated server checks the mock: the medians the
client measures are the simulator's own prediction for the same arrivals, at real time —
TPOT within 5% or 2 ms; TTFT within 5% plus the HTTP path's own time (a request's way in,
its first chunk's way out), which this test allows HTTP_ALLOWANCE_MS: on a 2-core host it
measures 1.1-2.1 ms in one process (issue 23 asks for 2 ms: met in most runs, not all)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from experiments.bench_serve_mock import free_port, measure, thread_server

RATE, PROMPTS, INPUT, OUTPUT = 8.0, 60, 256, 64
HTTP_ALLOWANCE_MS = 3.0


def test_the_client_measures_the_simulators_prediction_at_real_time():
    port = free_port()
    stop = thread_server(port, 1.0)
    try:
        measured, predicted = measure(f"http://127.0.0.1:{port}", 1.0, PROMPTS, RATE, INPUT,
                                      OUTPUT)
    finally:
        stop()
    assert measured["completed"] == PROMPTS
    tpot, ttft = predicted["tpot_p50"] * 1e3, predicted["ttft_p50"] * 1e3
    assert abs(measured["median_tpot_ms"] - tpot) <= max(0.05 * tpot, 2.0)
    assert 0.95 * ttft <= measured["median_ttft_ms"] <= 1.05 * ttft + HTTP_ALLOWANCE_MS
