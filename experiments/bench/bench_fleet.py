"""Benchmark: the fleet driver's speed against one engine (`bench_sim --dp N`).

The single-engine benchmark (1000 ShareGPT-like requests at 20 req/s, Llama-3-8B on one
H100, roofline) and N replicas of it behind round_robin at N times the rate (N x 1000
requests at N x 20 req/s, so each replica sees the single engine's traffic), interleaved,
`repeats` times. Reports each one's simulated seconds per wall second, the fleet's per
replica (N x simulated / wall, replica-seconds per wall second), and the fleet's
per-replica ratio over the single engine's (issue 22's bar: at least 0.8).

Run as a script, it reports issue 43's measure instead: CPU seconds per request served by
`sim.simulate` as a user calls it (this checkout's simulator, or `--tree`'s: a before and
after), the single engine (lean) against `Fleet(n, router)` for 1, 4 and 16 replicas at n
times the rate (each replica sees the single engine's traffic), and each fleet's ratio to
the single engine (bar: at most 2 at 16 replicas). Every run is a fresh process, the single
engine and the fleets interleaved, best of `--repeats`.

    python -m experiments.bench.bench_fleet [--num-requests 500] [--replicas 1 4 16]
        [--routers round_robin cache_aware least_load] [--repeats 3] [--tree PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from experiments.bench.cpu_info import cpu_model
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.workload import Workload
from sim.cost.step_bounds import step_bounds
from sim.fleet.driver import Replica, drive_fleet
from sim.fleet.result import fleet_result
from sim.routers import make_router
from sim.run.build import build_simulation


def fleet_once(c, workload: Workload, replicas: int) -> dict[str, float]:
    """One fleet run, timed as bench_sim's run_once times one engine (build, drive, result)."""
    t0 = time.perf_counter()
    sims = [build_simulation(model=c.model, hardware=c.hardware, tp=c.tp, seed=c.seed)
            for _ in range(replicas)]
    run = drive_fleet([Replica(s.scheduler, s.runner, s.token_source.finished) for s in sims],
                      workload, make_router("round_robin", replicas))
    result = fleet_result(run, bounds=[step_bounds(s.cost_model, t, s.runner.overlap)
                                               for s, t in zip(sims, run.traces, strict=True)])
    wall = time.perf_counter() - t0
    simulated = float((result.steps["start_time"] + result.steps["duration"]).max())
    return {"wall_s": wall, "simulated_s": simulated, "steps": len(result.steps),
            "speedup": simulated / wall, "per_replica_speedup": replicas * simulated / wall,
            "completed": result.summary["completed"]}


def bench_fleet(c, replicas: int, run_single) -> dict:
    """`run_single(c, workload)`: bench_sim's one-engine timing."""
    single_w = ShareGPTLike(c.num_requests).build(vocab_size=c.vocab_size, seed=c.seed,
                                                  rate=c.rate)
    fleet_w = ShareGPTLike(replicas * c.num_requests).build(vocab_size=c.vocab_size, seed=c.seed,
                                                            rate=replicas * c.rate)
    singles, fleets = [], []
    for _ in range(c.repeats):   # NOTE: interleaved, so a slow phase of the host hits both
        singles.append(run_single(c, single_w))
        fleets.append(fleet_once(c, fleet_w, replicas))
    single = min(singles, key=lambda r: r["wall_s"])
    fleet = min(fleets, key=lambda r: r["wall_s"])
    ratio = fleet["per_replica_speedup"] / single["speedup"]
    print(f"{replicas} replicas x ({c.num_requests} requests @ {c.rate}/s), {c.model} on "
          f"{c.tp}x {c.hardware}, round_robin ({cpu_model()}), best of {c.repeats}")
    print(f"  one engine : {single['speedup']:7.1f}x real time ({single['simulated_s']:.1f} s "
          f"simulated in {single['wall_s']:.2f} s)")
    print(f"  fleet      : {fleet['speedup']:7.1f}x real time, {fleet['per_replica_speedup']:.1f}x "
          f"per replica ({fleet['simulated_s']:.1f} s simulated in {fleet['wall_s']:.2f} s)")
    print(f"  per-replica ratio fleet / one engine: {ratio:.3f} (bar 0.8)")
    return {"replicas": replicas, "single": single, "fleet": fleet, "ratio": ratio,
            "single_runs": singles, "fleet_runs": fleets, "machine": cpu_model()}


ROOT = Path(__file__).resolve().parents[2]
_CHILD = """
import json, sys, time
import sim
from shared.workload.sharegpt import ShareGPTLike
from sim.fleet.fleet_layout import Fleet
num_requests, rate, replicas, router = json.loads(sys.argv[1])
n = replicas * num_requests
workload = ShareGPTLike(n).build(vocab_size=128256, seed=0, rate=replicas * rate)
layout = {} if router is None else {"layout": Fleet(replicas, router)}
t0 = time.process_time()
sim.simulate(workload, model="llama-3-8b", hardware="h100", **layout)
print((time.process_time() - t0) / n)
"""


def cpu_per_request(num_requests: int, rate: float, replicas: int, router: str | None,
                    tree: Path = ROOT) -> float:
    """CPU seconds per request of one `sim.simulate` run (router None: the single engine) of
    `replicas` x num_requests ShareGPT-like requests at replicas x rate, in a fresh process
    running the simulator of the checkout `tree` (another one: a before/after)."""
    args = json.dumps([num_requests, rate, replicas, router])
    out = subprocess.run([sys.executable, "-c", _CHILD, args], cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def cpu_ratios(num_requests: int, rate: float, replicas: list[int], routers: list[str],
               repeats: int, tree: Path = ROOT) -> dict:
    """Best-of-`repeats` CPU per request of the single engine and of every (replicas, router)
    fleet, each run in a fresh process, and each fleet's ratio to the single engine."""
    runs = {"single": []} | {f"{r}x {name}": [] for name in routers for r in replicas}
    for _ in range(repeats):   # NOTE: interleaved, so a slow phase of the host hits all alike
        runs["single"].append(cpu_per_request(num_requests, rate, 1, None, tree))
        for name in routers:
            for r in replicas:
                runs[f"{r}x {name}"].append(cpu_per_request(num_requests, rate, r, name,
                                                            tree))
    best = {k: min(v) for k, v in runs.items()}
    return {"best_ms": {k: v * 1e3 for k, v in best.items()},
            "ratio": {k: v / best["single"] for k, v in best.items() if k != "single"}}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description="CPU per request: fleets against one engine")
    p.add_argument("--num-requests", type=int, default=500, help="per replica")
    p.add_argument("--rate", type=float, default=20.0, help="per replica, requests/s")
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--routers", nargs="+", default=["round_robin", "cache_aware", "least_load"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tree", type=Path, default=ROOT,
                   help="the checkout whose simulator runs (default: this one)")
    a = p.parse_args(argv)
    report = cpu_ratios(a.num_requests, a.rate, a.replicas, a.routers, a.repeats, a.tree)
    print(f"{a.num_requests} ShareGPT-like requests @ {a.rate}/s per replica, llama-3-8b on "
          f"h100, roofline ({cpu_model()}), CPU per request served, best of {a.repeats}, "
          f"{a.tree}")
    print(f"  {'single engine':24s} {report['best_ms']['single']:6.3f} ms")
    for key, ratio in report["ratio"].items():
        print(f"  {key:24s} {report['best_ms'][key]:6.3f} ms  ratio {ratio:5.2f} (bar 2)")
    return report


if __name__ == "__main__":
    main()
