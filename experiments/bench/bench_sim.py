"""Benchmark: how much faster than real time the simulator runs.

1000 ShareGPT-like requests at 20 requests/s, Llama-3-8B on one H100 (the default cost model,
the kernel model).
Times the three phases of what `sim.simulate` does by default, a lean run (`Keep(trace=False)`:
no step records kept, `shared.trace.run_log`), separately: building the scheduler and runner,
the SimPy run, and the RunResult read from the run's log (`result_from_log`, the steps'
bounds priced as they were folded). Prints simulated seconds (to the last request's finish)
per wall second, forward steps per wall second and wall microseconds per step, and the CPU
model. The bar (reference/simulators.md §4: BLIS ~200x, Dynamo's mocker ~240x) is 200x.

Each repeat runs the simulator twice, interleaved: with decode runs (the default: the steps
of an unchanged batch up to the next event applied at once, `shared.loop.decode_run`) and with the
step-by-step loop (`drive_workload(..., decode_runs=False)`); both give the same trace, and
the report gives their ratio and how many steps the runs covered.

It does so for four configurations, the default (the kernel cost model), two common flags
(`disable_radix_cache`, `enable_mixed_chunk`) and the roofline cost model
(`--cost-model roofline`), repeats interleaved across them, and gives each one's wall time
against the default's; `--engine-args` adds one of your own.

    python -m experiments.bench.bench_sim [--num-requests 1000] [--repeats 3] [--profile]
        [--engine-args page_size=16,chunked_prefill_size=2048]
    python -m experiments.bench.bench_sim --dp 4    # 4 replicas at 4x the rate (bench_fleet)

Writes experiments/results/bench_sim.json with the configurations it ran; `--profile` also
prints a cProfile summary of one default run (cumulative and internal time).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from experiments.bench.cpu_info import cpu_model
from shared.trace.log_result import result_from_log
from shared.trace.run_log import Keep
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.workload import Workload
from sim.run.build import build_simulation
from sim.run.driver import drive_workload

BAR_SPEEDUP = 200.0
ENGINE_CONFIGS = {"default": {}, "disable_radix_cache": {"disable_radix_cache": True},
                  "enable_mixed_chunk": {"enable_mixed_chunk": True},
                  "roofline_cost_model": {"cost_model": "roofline"}}


@dataclass(frozen=True)
class BenchConfig:
    num_requests: int = 1000
    rate: float = 20.0
    vocab_size: int = 128256
    model: str = "llama-3-8b"
    hardware: str = "h100"
    tp: int = 1
    seed: int = 0
    repeats: int = 3


def run_once(c: BenchConfig, workload: Workload, decode_runs: bool = True,
             engine_args: dict | None = None) -> dict[str, float]:
    """One lean run of `workload`, as `sim.simulate` runs it by default, timed by phase."""
    t0 = time.perf_counter()
    s = build_simulation(model=c.model, hardware=c.hardware, tp=c.tp, seed=c.seed,
                         keep=Keep(trace=False), **(engine_args or {}))
    applied = count_run_steps(s.scheduler)
    t1 = time.perf_counter()
    log = drive_workload(s.scheduler, s.runner, workload, finished_hook=s.token_source.finished,
                         decode_runs=decode_runs)
    t2 = time.perf_counter()
    result = result_from_log(log)
    t3 = time.perf_counter()
    simulated, steps, wall = float(result.requests["finish_time"].max()), result.num_steps, t3 - t0
    return {"wall_s": wall, "build_s": t1 - t0, "drive_s": t2 - t1, "run_result_s": t3 - t2,
            "simulated_s": simulated, "steps": steps,
            "speedup": simulated / wall, "drive_only_speedup": simulated / (t2 - t1),
            "steps_per_wall_s": steps / wall, "wall_us_per_step": wall / steps * 1e6,
            "drive_us_per_step": (t2 - t1) / steps * 1e6,
            "completed": result.summary["completed"], "decode_runs": len(applied),
            "steps_in_decode_runs": sum(applied)}


def count_run_steps(scheduler) -> list[int]:
    """The length of every decode run the scheduler applies (a list that fills as it runs)."""
    applied: list[int] = []
    apply = scheduler.apply_decode_run

    def counted(tokens, *args, **kwargs) -> list:
        applied.append(len(tokens))
        return apply(tokens, *args, **kwargs)

    scheduler.apply_decode_run = counted
    return applied


def profile(c: BenchConfig, workload: Workload, top: int = 25) -> None:
    prof = cProfile.Profile()
    prof.enable()
    run_once(c, workload)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def parse_engine_args(text: str) -> dict:
    """'a=1,b=true' -> {'a': 1, 'b': True}: each value read as JSON, else kept as a string."""
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--engine-args: {item!r} is not KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def bench_config(c: BenchConfig, workload: Workload, engine_args: dict) -> dict:
    """One repeat of one engine configuration: with decode runs, then step by step."""
    return {"runs": run_once(c, workload, engine_args=engine_args),
            "stepwise": run_once(c, workload, decode_runs=False, engine_args=engine_args)}


def report_config(name: str, c: BenchConfig, runs: list[dict], stepwise: list[dict],
                  default_wall: float) -> dict:
    best = min(runs, key=lambda r: r["wall_s"])
    best_stepwise = min(stepwise, key=lambda r: r["wall_s"])
    print(f"[{name}] {best['simulated_s']:.2f} s simulated in {best['wall_s']:.3f} s wall "
          f"(best of {c.repeats}; {best['wall_s'] / default_wall:.2f}x the default's wall time)")
    print(f"  simulated s per wall s : {best['speedup']:8.1f}x  (bar {BAR_SPEEDUP:.0f}x; "
          f"SimPy run alone {best['drive_only_speedup']:.1f}x)")
    print(f"  forward steps per wall s: {best['steps_per_wall_s']:8.0f}  ({best['steps']} steps)")
    print(f"  wall us per step        : {best['wall_us_per_step']:8.1f}  "
          f"(SimPy run {best['drive_us_per_step']:.1f}, RunResult "
          f"{best['run_result_s'] / best['steps'] * 1e6:.1f})")
    print(f"  decode runs             : {best['decode_runs']:8d}  covering "
          f"{best['steps_in_decode_runs']} steps")
    print(f"  step-by-step loop       : {best_stepwise['speedup']:8.1f}x  (decode runs "
          f"{best_stepwise['wall_s'] / best['wall_s']:.2f}x faster, same trace)")
    return {"best": best, "runs": runs, "best_step_by_step": best_stepwise,
            "step_by_step_runs": stepwise, "wall_vs_default": best["wall_s"] / default_wall}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-requests", type=int, default=BenchConfig.num_requests)
    p.add_argument("--repeats", type=int, default=BenchConfig.repeats)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--engine-args", type=parse_engine_args, default=None, metavar="K=V,...",
                   help="one more engine configuration to time (EngineConfig fields)")
    p.add_argument("--dp", type=int, default=None, metavar="N",
                   help="time N replicas at N x the rate against one engine instead "
                        "(experiments.bench.bench_fleet)")
    p.add_argument("--out", default="experiments/results/bench_sim.json")
    args = p.parse_args(argv)
    c = BenchConfig(num_requests=args.num_requests, repeats=args.repeats)
    if args.dp is not None:
        from experiments.bench.bench_fleet import bench_fleet

        return bench_fleet(c, args.dp, run_once)
    workload = ShareGPTLike(c.num_requests).build(vocab_size=c.vocab_size, seed=c.seed,
                                                  rate=c.rate)
    configs = dict(ENGINE_CONFIGS)
    if args.engine_args:
        configs["custom"] = args.engine_args
    # NOTE: an untimed warm-up run, so the modules a run imports on first use (pandas, for
    # the result's tables) are not timed in the first configuration's first repeat
    run_once(c, ShareGPTLike(10).build(vocab_size=c.vocab_size, seed=c.seed, rate=c.rate))
    results = {name: [] for name in configs}
    for _ in range(c.repeats):  # NOTE: interleaved, so a slow phase of the host hits all alike
        for name, engine_args in configs.items():
            results[name].append(bench_config(c, workload, engine_args))
    print(f"{c.num_requests} requests @ {c.rate}/s, {c.model} on {c.tp}x {c.hardware} "
          f"({cpu_model()})")
    default_wall = min(r["runs"]["wall_s"] for r in results["default"])
    report = {"config": asdict(c), "bar_speedup": BAR_SPEEDUP,
              "machine": cpu_model(), "cpu_count": os.cpu_count(),
              "python": platform.python_version(), "engine_configs": configs}
    for name, rs in results.items():
        report[name] = report_config(name, c, [r["runs"] for r in rs],
                                     [r["stepwise"] for r in rs], default_wall)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if args.profile:
        profile(c, workload)
    return report


if __name__ == "__main__":
    main()
