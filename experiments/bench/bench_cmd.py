"""`batchtwin bench serve`: `vllm bench serve` for any OpenAI-compatible server.

    batchtwin bench serve --base-url http://127.0.0.1:30000 --model llama-3-8b \
        --dataset-name random --num-prompts 200 --request-rate 8 --save-result

`--dataset-name random|sharegpt-like|shared-prefix` (`experiments.bench.bench_datasets`:
prompts of four-character words, one token each for batchtwin's placeholder codec, output
lengths sent as max_tokens with ignore_eos); `--request-rate` (inf: all at once) with
`--burstiness` (gamma shape, 1: Poisson), `--max-concurrency`, `--seed`. Prints vLLM's result table and with
`--save-result` writes its JSON fields (`--result-filename`, default
`batchtwin-{rate}qps-{model}.json`); `--goodput ttft:MS tpot:MS e2el:MS` adds
request_goodput (requests meeting every limit / duration).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from experiments.bench.bench_datasets import add_dataset_arguments, dataset_requests
from experiments.cli.arg_types import positive_int

HELP = "benchmark an OpenAI-compatible server as `vllm bench serve` does"
ROWS = (("ttft", "Time to First Token", "TTFT"),
        ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
        ("itl", "Inter-token Latency", "ITL"), ("e2el", "End-to-end Latency", "E2EL"))


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="bench_command", required=True, metavar="serve")
    s = sub.add_parser("serve", help="benchmark a running server")
    s.add_argument("--base-url", required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--num-prompts", type=positive_int, default=1000)
    add_dataset_arguments(s)
    s.add_argument("--request-rate", type=float, default=math.inf)
    s.add_argument("--burstiness", type=float, default=1.0)
    s.add_argument("--max-concurrency", type=positive_int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS")
    s.add_argument("--save-result", action="store_true")
    s.add_argument("--result-filename", default=None)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from experiments.bench.serve_bench import run_requests, summarize

    limits = parse_goodput(args.goodput)
    requests = dataset_requests(args)
    outcomes, duration = asyncio.run(run_requests(args.base_url, args.model, requests,
                                                  args.max_concurrency))
    result = summarize(outcomes, duration)
    if limits is not None:
        good = [o for o in outcomes if not o.error and _meets(o, limits)]
        result["request_goodput"] = len(good) / duration if duration > 0 else math.nan
    print_table(result)
    if args.save_result:
        name = args.result_filename or f"batchtwin-{args.request_rate:g}qps-{args.model}.json"
        Path(name).write_text(json.dumps({"model_id": args.model, "num_prompts": args.num_prompts,
                                          "request_rate": args.request_rate, **result},
                                         indent=2) + "\n")
    return 0 if result["failed"] == 0 else 1


def parse_goodput(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    limits = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or key not in ("ttft", "tpot", "e2el"):
            raise ValueError(f"--goodput: {item!r} is not ttft|tpot|e2el:MILLISECONDS")
        limits[key] = float(value) / 1e3
    return limits


def _meets(o, limits: dict[str, float]) -> bool:
    tpot = (o.e2e - o.ttft) / (o.output_tokens - 1) if o.output_tokens > 1 else 0.0
    values = {"ttft": o.ttft, "tpot": tpot, "e2el": o.e2e}
    return all(values[k] <= v for k, v in limits.items())


def print_table(r: dict[str, float]) -> None:
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    for label, key, fmt in (("Successful requests:", "completed", "d"),
                            ("Benchmark duration (s):", "duration", ".2f"),
                            ("Total input tokens:", "total_input_tokens", "d"),
                            ("Total generated tokens:", "total_output_tokens", "d"),
                            ("Request throughput (req/s):", "request_throughput", ".2f"),
                            ("Output token throughput (tok/s):", "output_throughput", ".2f")):
        print(f"{label:<40}{r[key]:<10{fmt}}")
    if "request_goodput" in r:
        print(f"{'Request goodput (req/s):':<40}{r['request_goodput']:<10.2f}")
    for key, title, short in ROWS:
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat, name in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            print(f"{f'{name} {short} (ms):':<40}{r[f'{stat}_{key}_ms']:<10.2f}")
    print("=" * 50)
