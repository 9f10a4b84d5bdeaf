"""Benchmark: building and reading a large generated workload.

For each size, in a fresh process (so the peak RSS is that size's alone): the time to build
`ShareGPTLike(n).build(vocab_size=128256, seed=0, rate=20)`, the process's peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`) after the imports, after the build and after
reading every request once in order (`for r in workload.requests`, each prompt's ids
touched: what the simulator's arrival cursor does), and the time of that pass.

    python -m experiments.bench.bench_workload [--sizes 10000,100000,1000000] [--no-iterate]

Prints one JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

VOCAB_SIZE = 128256


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


def measure(n: int, iterate: bool) -> dict:
    """One size, in this process."""
    from shared.workload.sharegpt import ShareGPTLike

    record: dict = {"num_requests": n, "rss_after_imports_mb": round(peak_rss_mb(), 1)}
    t0 = time.perf_counter()
    workload = ShareGPTLike(n).build(vocab_size=VOCAB_SIZE, seed=0, rate=20)
    record["build_s"] = round(time.perf_counter() - t0, 3)
    record["rss_after_build_mb"] = round(peak_rss_mb(), 1)
    if iterate:
        t0, tokens = time.perf_counter(), 0
        for r in workload.requests:
            tokens += len(r.input_ids)
        record["iterate_s"] = round(time.perf_counter() - t0, 3)
        record["prompt_tokens"] = tokens
        record["rss_after_iterate_mb"] = round(peak_rss_mb(), 1)
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--no-iterate", action="store_true")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one, not args.no_iterate)), flush=True)
        return
    for n in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, "-m", "experiments.bench.bench_workload", "--one", str(n)]
        subprocess.run(cmd + (["--no-iterate"] if args.no_iterate else []), check=True)


if __name__ == "__main__":
    main()
