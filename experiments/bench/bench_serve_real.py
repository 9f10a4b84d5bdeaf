"""Benchmark: the real server's own overhead. `batchtwin bench serve`'s TTFT and TPOT
medians through `batchtwin serve` (real mode) against the Engine's own for the same
workload, served online by `Engine.run` without HTTP, as ratios (issue 23).

    python -m experiments.bench.bench_serve_real [--model PATH] [--num-prompts 40] [--rate 2]
        [--input-len 32] [--output-len 32] [--rounds 2] [--threads N]

One Engine (SmolLM2-135M-Instruct by default) serves both sides in turn, after a warm-up,
each from an empty prefix cache (Engine.reset):
first behind the server (a ServingLoop over ExecStepper on its thread, uvicorn on another, the client in
this process over loopback), then directly, its requests the prompts the server tokenized,
arriving at the client's send times, with the sampling parameters the server built
(temperature 1, ignore_eos). Each round runs both; the table prints every round's medians,
their ratios and the CPU model (both sides share the host's cores with the client).
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np

from experiments.bench.cpu_info import cpu_model

NAME = "served"


def main(argv: list[str] | None = None) -> list[dict]:
    args = _parser().parse_args(argv)
    import torch

    from exec.engine.engine import Engine

    if args.threads:
        torch.set_num_threads(args.threads)
    engine = Engine(args.model)
    engine.generate(["warm up"] * 4, {"max_new_tokens": 8})
    sent = _requests(args)
    rows = [_round(engine, sent, i) for i in range(args.rounds)]
    print(f"{args.num_prompts} random requests ({args.input_len} words in, {args.output_len} "
          f"tokens out) at {args.rate:g} req/s, {args.model or 'the default model'} on {cpu_model()}, "
          f"{torch.get_num_threads()} torch threads")
    for i, r in enumerate(rows):
        print(f"  round {i}: TTFT p50 server {r['server_ttft_ms']:7.2f} ms, engine "
              f"{r['engine_ttft_ms']:7.2f} ms, ratio {r['ttft_ratio']:.3f}; TPOT p50 server "
              f"{r['server_tpot_ms']:6.2f} ms, engine {r['engine_tpot_ms']:6.2f} ms, "
              f"ratio {r['tpot_ratio']:.3f}")
    return rows


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="checkpoint folder or .gguf (default SmolLM2)")
    p.add_argument("--num-prompts", type=int, default=40)
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    return p


def _requests(args: argparse.Namespace):
    from experiments.bench.bench_datasets import random_requests

    return random_requests(argparse.Namespace(
        num_prompts=args.num_prompts, request_rate=args.rate, burstiness=1.0, seed=1,
        random_input_len=args.input_len, random_output_len=args.output_len, random_range_ratio=0.0))


def _round(engine, sent, index: int) -> dict:
    served, send_times = _served(engine, sent)
    direct = _direct(engine, sent, send_times, f"direct-{index}")
    row = {"server_ttft_ms": served["median_ttft_ms"], "server_tpot_ms": served["median_tpot_ms"],
           "engine_ttft_ms": direct["ttft_p50"] * 1e3, "engine_tpot_ms": direct["tpot_p50"] * 1e3}
    row["ttft_ratio"] = row["server_ttft_ms"] / row["engine_ttft_ms"]
    row["tpot_ratio"] = row["server_tpot_ms"] / row["engine_tpot_ms"]
    return row


def _served(engine, sent) -> tuple[dict, list[float]]:
    """bench serve's summary of `sent` through a real-mode server on `engine`, and the
    client's send times (seconds from the first)."""
    from exec.engine.online_engine import ExecStepper
    from experiments.bench.bench_serve_mock import app_thread, free_port
    from experiments.bench.serve_bench import run_requests, summarize
    from experiments.serve.app import create_app
    from experiments.serve.text_codec import EngineCodec
    from shared.online.serving_loop import ServingLoop

    engine.reset()   # NOTE: an empty prefix cache for each side, or the second one hits it
    port = free_port()
    stop = app_thread(create_app(ServingLoop(ExecStepper(engine, NAME)), EngineCodec(engine)), port)
    try:
        outcomes, duration = asyncio.run(run_requests(f"http://127.0.0.1:{port}", NAME, sent))
    finally:
        stop()
    failed = [o.error for o in outcomes if o.error]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, e.g. {failed[0]}")
    first = min(o.sent_at for o in outcomes)
    return summarize(outcomes, duration), [o.sent_at - first for o in outcomes]


def _direct(engine, sent, send_times: list[float], prefix: str) -> dict:
    """`Engine.run`'s summary of the same prompts (tokenized as the server does) arriving
    at `send_times`, with the server's sampling parameters for them."""
    from experiments.serve.openai_request import CompletionRequest
    from shared.workload.workload import Workload, WorkloadRequest

    engine.reset()
    reqs = []
    for i, (s, t) in enumerate(zip(sent, send_times, strict=True)):
        params = CompletionRequest(model=NAME, prompt=s.prompt, max_tokens=s.max_tokens,
                                   ignore_eos=True).sampling_params()
        reqs.append(WorkloadRequest(f"{prefix}-{i}", float(t),
                                    tuple(int(x) for x in engine.tokenize(s.prompt)), params))
    summary = engine.run(Workload(tuple(reqs))).summary
    if np.isnan(summary["ttft_p50"]):
        raise RuntimeError("the direct run measured no TTFT")
    return summary


if __name__ == "__main__":
    main()
