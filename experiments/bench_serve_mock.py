"""Benchmark: how close the simulated server's answers, measured by `batchtwin bench serve`
over HTTP, come to the simulator's own prediction of the same run (issue 23's mock check).

    python -m experiments.bench_serve_mock [--time-scale 1] [--separate-process]
        [--num-prompts 60] [--rate 8] [--input-len 256] [--output-len 64]

Starts `batchtwin serve --simulate` (Llama-3-8B on an H100, roofline) in this process or,
with --separate-process, in its own; sends the random dataset at `--rate` simulated req/s
(x time scale in wall time); runs `sim.simulate` on the same prompts at the client's send
times; prints measured and predicted TTFT and TPOT medians in the client's milliseconds and
their difference, with the CPU model (the HTTP path's time depends on the host).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from experiments.cpu_info import cpu_model


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--separate-process", action="store_true")
    p.add_argument("--num-prompts", type=int, default=60)
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    args = p.parse_args(argv)
    port = free_port()
    stop = (subprocess_server if args.separate_process else thread_server)(port, args.time_scale)
    try:
        measured, predicted = measure(f"http://127.0.0.1:{port}", args.time_scale,
                                      args.num_prompts, args.rate, args.input_len,
                                      args.output_len)
    finally:
        stop()
    where = "its own process" if args.separate_process else "this process"
    print(f"simulated server in {where}, time scale {args.time_scale:g}, {args.num_prompts} "
          f"requests at {args.rate:g} req/s simulated ({cpu_model()})")
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot")):
        got, want = measured[f"median_{key}_ms"], predicted[f"{key}_p50"] / args.time_scale * 1e3
        print(f"  {name} median: measured {got:8.3f} ms, predicted {want:8.3f} ms, "
              f"difference {got - want:+.3f} ms ({got / want - 1:+.1%})")
    return {"measured": measured, "predicted": predicted}


def measure(base: str, time_scale: float, num_prompts: int, rate: float, input_len: int,
            output_len: int):
    """(bench serve's summary of the run against `base`, `sim.simulate`'s summary of the
    same prompts at the client's send times x time_scale)."""
    from experiments.serve.bench import run_requests, summarize
    from experiments.serve.bench_datasets import random_requests
    from experiments.serve.text_codec import PlaceholderCodec
    from shared import SamplingParams, Workload
    from shared.workload import WorkloadRequest
    from sim.simulate import simulate

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
    from experiments.cli import build_parser
    from experiments.serve.cmd import build_app

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

    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "serve", "--simulate",
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
