"""Benchmark: the fleet driver's speed against one engine (`bench_sim --dp N`).

The single-engine benchmark (1000 ShareGPT-like requests at 20 req/s, Llama-3-8B on one
H100, roofline) and N replicas of it behind round_robin at N times the rate (N x 1000
requests at N x 20 req/s, so each replica sees the single engine's traffic), interleaved,
`repeats` times. Reports each one's simulated seconds per wall second, the fleet's per
replica (N x simulated / wall, replica-seconds per wall second), and the fleet's
per-replica ratio over the single engine's (issue 22's bar: at least 0.8).
"""

from __future__ import annotations

import time

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
