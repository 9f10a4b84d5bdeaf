"""`batchtwin bench serve` against the simulated server checks the mock: the medians the
client measures are the simulator's own prediction for the same arrivals, at real time —
TPOT within 5% or 2 ms; TTFT within 5% plus the HTTP path's own time, which this test bounds
at HTTP_OVERHEAD_MS (client, server and engine in one process on a 2-core host measure
2.3-2.6 ms; issue 23 asks for 2 ms, not met yet)."""

from __future__ import annotations

import argparse
import asyncio
import math
import socket
import statistics
import threading
import time

import pytest

pytest.importorskip("openai", reason="the openai client is a test dependency")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

from experiments.serve.bench import run_requests, summarize
from experiments.serve.bench_cmd import random_requests
from experiments.serve.cmd import build_app
from experiments.serve.text_codec import PlaceholderCodec
from shared import SamplingParams, Workload
from shared.workload import WorkloadRequest
from sim.simulate import simulate

RATE, PROMPTS, INPUT, OUTPUT = 8.0, 60, 256, 64
HTTP_OVERHEAD_MS = 4.0   # a request's way in and its first chunk's way out


def _serve(time_scale: float):
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = argparse.Namespace(simulate=True, model="llama-3-8b", served_model_name=None,
                              hardware="h100", tp=1, cost_model=None, time_scale=time_scale,
                              seed=0, model_path=None)
    srv = uvicorn.Server(uvicorn.Config(build_app(args), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    return srv, thread, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("time_scale", [1.0])
def test_the_client_measures_the_simulators_prediction(time_scale):
    srv, thread, base = _serve(time_scale)
    try:
        args = argparse.Namespace(num_prompts=PROMPTS, request_rate=RATE * time_scale,
                                  burstiness=1.0, seed=1, random_input_len=INPUT,
                                  random_output_len=OUTPUT)
        sent = random_requests(args)
        outcomes, duration = asyncio.run(run_requests(base, "llama-3-8b", sent))
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
    measured = summarize(outcomes, duration)
    assert measured["completed"] == PROMPTS
    codec, first = PlaceholderCodec(128256), min(o.sent_at for o in outcomes)
    w = Workload(tuple(WorkloadRequest(
        f"r{i}", (o.sent_at - first) * time_scale, tuple(codec.encode(r.prompt)),
        SamplingParams(max_new_tokens=OUTPUT, ignore_eos=True))
        for i, (o, r) in enumerate(zip(outcomes, sent, strict=True))))
    predicted = simulate(w, model="llama-3-8b", hardware="h100").summary
    tpot = predicted["tpot_p50"] / time_scale * 1e3   # in the client's milliseconds
    assert abs(measured["median_tpot_ms"] - tpot) <= max(0.05 * tpot, 2.0)
    ttft = predicted["ttft_p50"] / time_scale * 1e3
    assert ttft * 0.95 <= measured["median_ttft_ms"] <= ttft * 1.05 + HTTP_OVERHEAD_MS
    assert not math.isnan(statistics.median(o.ttft for o in outcomes))
