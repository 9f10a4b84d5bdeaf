"""Benchmark: how close the simulated server's answers, measured by `batchtwin bench serve`
over HTTP, come to the simulator's own prediction of the same run, and what the HTTP path
adds (issue 23's mock check; a benchmark, not a test: its numbers depend on the host).

    python -m experiments.bench.bench_serve_mock [--time-scale 1] [--separate-process]
        [--num-prompts 60] [--rate 8] [--input-len 256] [--output-len 64]

Starts `batchtwin serve --simulate` (Llama-3-8B on an H100, roofline) in this process or,
with --separate-process, in its own; sends the random dataset at `--rate` simulated req/s
(x time scale in wall time); runs `sim.run.simulate` on the same prompts at the client's send
times; prints measured and predicted TTFT and TPOT medians in the client's milliseconds and
their difference, with the CPU model (the HTTP path's time depends on the host).

With --separate-process the server also saves its trace, and the run is split in its two
parts: the engine (the TTFT median the server's trace records, first token minus arrival on
the engine's clock, against the simulator's for the arrivals the server saw) and the HTTP
path (the client's TTFT median minus the server's, also in round trips of a plain
`GET /health` to the same server, the slower median of before and after the run). On a slow
2-core AMD EPYC the engine part was within -1.8..+1.3 ms of the simulator in 19 runs and the
HTTP path 2.8-3.9 round trips (6.4-10.2 ms) in 20 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.bench.cpu_info import cpu_model


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--separate-process", action="store_true")
    p.add_argument("--num-prompts", type=int, default=60)
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    args = p.parse_args(argv)
    port, saved = free_port(), Path(tempfile.mkdtemp()) / "trace.jsonl"
    if args.separate_process:
        stop = subprocess_server(port, args.time_scale, ["--trace-out", str(saved)])
    else:
        stop = thread_server(port, args.time_scale)
    base = f"http://127.0.0.1:{port}"
    try:
        trips = [round_trip_ms(base)]
        measured, predicted = measure(base, args.time_scale, args.num_prompts, args.rate,
                                      args.input_len, args.output_len)
        trips.append(round_trip_ms(base))
    finally:
        stop()
    report(args, measured, predicted, saved if args.separate_process else None, max(trips))
    return {"measured": measured, "predicted": predicted, "round_trip_ms": max(trips)}


def report(args: argparse.Namespace, measured: dict, predicted: dict, saved: Path | None,
           trip: float) -> None:
    """Print the client's medians against the simulator's and, with the server's saved trace,
    the engine's part and the HTTP path's (in wall-clock milliseconds)."""
    where = "this process" if saved is None else "its own process"
    print(f"simulated server in {where}, time scale {args.time_scale:g}, {args.num_prompts} "
          f"requests at {args.rate:g} req/s simulated ({cpu_model()})")
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot")):
        got, want = measured[f"median_{key}_ms"], predicted[f"{key}_p50"] / args.time_scale * 1e3
        print(f"  {name} median: measured {got:8.3f} ms, predicted {want:8.3f} ms, "
              f"difference {got - want:+.3f} ms ({got / want - 1:+.1%})")
    if saved is None:
        return
    served, replayed = (t / args.time_scale for t in served_and_replayed_ttft_ms(saved))
    http = measured["median_ttft_ms"] - served
    print(f"  engine: TTFT median {served:8.3f} ms in the server's trace, {replayed:8.3f} ms "
          f"simulated at its arrivals, difference {served - replayed:+.3f} ms")
    print(f"  HTTP path: client TTFT median - server's {http:+.3f} ms, {http / trip:.1f} "
          f"round trips of {trip:.3f} ms (GET /health)")


def served_and_replayed_ttft_ms(saved: Path) -> tuple[float, float]:
    """(the TTFT median the server's saved trace records, the simulator's for its arrivals),
    in simulated milliseconds."""
    from shared import Trace, Workload
    from shared.workload.workload import WorkloadRequest
    from sim.run.simulate import simulate

    reqs = sorted(Trace.load(saved).requests.values(), key=lambda r: r.arrival_time)
    served = statistics.median(r.first_token_time - r.arrival_time for r in reqs)
    first = reqs[0].arrival_time
    w = Workload(tuple(WorkloadRequest(r.rid, r.arrival_time - first, r.input_ids,
                                       r.sampling_params) for r in reqs))
    replayed = simulate(w, model="llama-3-8b", hardware="h100").summary["ttft_p50"]
    return served * 1e3, replayed * 1e3


def round_trip_ms(base: str, n: int = 30) -> float:
    """The median time of one GET /health on this host (after a few warm-up requests)."""
    import httpx

    times = []
    with httpx.Client() as client:
        for i in range(n + 5):
            start = time.perf_counter()
            client.get(f"{base}/health").raise_for_status()
            if i >= 5:
                times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(base: str, time_scale: float, num_prompts: int, rate: float, input_len: int,
            output_len: int):
    """(bench serve's summary of the run against `base`, `sim.run.simulate`'s summary of the
    same prompts at the client's send times x time_scale)."""
    from experiments.bench.bench_datasets import random_requests
    from experiments.bench.serve_bench import run_requests, summarize
    from experiments.serve.text_codec import PlaceholderCodec
    from shared import SamplingParams, Workload
    from shared.workload.workload import WorkloadRequest
    from sim.run.simulate import simulate

    spec = argparse.Namespace(num_prompts=num_prompts, request_rate=rate * time_scale,
                              burstiness=1.0, seed=1, random_input_len=input_len,
                              random_output_len=output_len, random_range_ratio=0.0)
    sent = random_requests(spec)
    outcomes, duration = asyncio.run(run_requests(base, "llama-3-8b", sent))
    codec, first = PlaceholderCodec(128256), min(o.sent_at for o in outcomes)
    w = Workload(tuple(WorkloadRequest(
        f"r{i}", (o.sent_at - first) * time_scale, tuple(codec.encode(r.prompt)),
        SamplingParams(max_new_tokens=output_len, ignore_eos=True))
        for i, (o, r) in enumerate(zip(outcomes, sent, strict=True))))
    return summarize(outcomes, duration), simulate(w, model="llama-3-8b", hardware="h100").summary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_server(port: int, time_scale: float):
    """`batchtwin serve --simulate` (Llama-3-8B, H100) on a thread of this process; returns
    its stop()."""
    from experiments.main import build_parser
    from experiments.serve.serve_cmd import build_app

    args = build_parser().parse_args(["serve", "--simulate", "--time-scale", f"{time_scale!r}"])
    return app_thread(build_app(args), port)


def app_thread(app, port: int, graceful_s: float | None = None):
    """Serve `app` with uvicorn on 127.0.0.1:`port` from a thread; returns a stop() that
    shuts it down (requests still open after `graceful_s` are cancelled; None: waits for
    them), runs the app's lifespan end and joins the thread."""
    import uvicorn

    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                        timeout_graceful_shutdown=graceful_s))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        if not thread.is_alive():
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.05)

    def stop() -> None:
        srv.should_exit = True
        thread.join(timeout=60)
    return stop


def subprocess_server(port: int, time_scale: float, flags: Sequence[str] = ()):
    """`batchtwin serve --simulate` with `flags` in a process of its own; returns its stop()."""
    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "experiments.main", "serve", "--simulate",
                             "--port", str(port), "--time-scale", f"{time_scale:g}", *flags])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)

    def stop() -> None:
        proc.terminate()
        proc.wait(timeout=30)
    return stop


if __name__ == "__main__":
    main()
