"""`batchtwin plan`: the largest request rate each configuration serves within the SLOs, and
the configurations ranked by goodput per GPU (simulated; runs with no arguments).

    batchtwin plan                                           # llama-3-8b on h100, defaults
    batchtwin plan --model llama-3-70b --hardware h100,h200 --tp 4,8 \
        --slo ttft_p90=2s,tpot_p90=100ms --max-running-requests 64,256,auto --out plan-70b
    batchtwin plan --model deepseek-v3 --hardware h200 --tp 8 --ep-size 1,8 \
        --quantization fp8 --kv-cache-dtype auto,fp8_e4m3
    batchtwin plan --model llama-3-70b --hardware h100 --tp 4,8 --dp 1,2,4 \
        --target-rate 40 --gpu-hour-price 2.5 [--backend ray [--ray-address ADDR]]

Writes to `--out` (default ./batchtwin-plan/): report.md (Recommendation, Target rate with
--target-rate, Headroom, Limits, Sweep), PNG plots (TTFT/TPOT against rate, goodput against
rate, KV usage and batch composition over time at the chosen rate, the Pareto front:
`experiments.plan.pareto`), runs.csv (every run), sweep.csv (one row per configuration) and
config.json (the exact configuration). `--dp` candidates are replicas behind `--router`
(`sim.fleet.fleet_layout`); `--target-rate` picks the fewest GPUs that serve it
(`experiments.plan.fleet_choice`). Exit 0 when a configuration meets the SLOs (with
--target-rate: when one serves it), 3 when none does (the report says why), 1 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

from experiments.cli.arg_types import (
    at_least,
    non_negative_float,
    non_negative_int,
    open_fraction,
    positive_finite_float,
    positive_int,
)
from experiments.cli.flags import cost_model_names, engine_profile_arg, engine_profile_arguments
from experiments.cli.output_paths import check_output_folder, remove_stale
from experiments.plan.grid import NONE_WORDS, Grid, check_candidates, parse_list
from experiments.plan.slo import DEFAULT_SLO, format_rate
from experiments.plan.steady_state import MAX_SCALE
from sim.routers import DEFAULT_ROUTER, ROUTERS

HELP = "find the highest request rate within SLOs and rank configurations by goodput per GPU"
EXIT_INFEASIBLE = 3
MIN_REQUESTS = 10
PLAN_FILES = ("report.md", "runs.csv", "sweep.csv", "config.json", "latency_vs_rate.png",
              "goodput_vs_rate.png", "kv_usage.png", "batch_composition.png", "pareto.png")


def configure(p: argparse.ArgumentParser) -> None:
    from shared.workload.registry import GENERATORS

    d = Grid()
    m = p.add_argument_group("model and hardware (comma lists are swept)")
    m.add_argument("--model", default="llama-3-8b", help="embedded key or config.json path")
    m.add_argument("--hardware", default=",".join(d.hardware), help="catalogue keys or JSON paths")
    m.add_argument("--tp", default=",".join(map(str, d.tp)), help="tensor-parallel degrees")
    m.add_argument("--ep-size", default="1", help="expert-parallel degrees (MoE; divide --tp)")
    m.add_argument("--dp", default="1", help="engine replicas behind --router, --tp GPUs each")
    m.add_argument("--router", default=DEFAULT_ROUTER, help="the policy in front of the "
                   f"replicas ({', '.join(ROUTERS)})")
    m.add_argument("--disaggregate", default="off", help="prefill/decode layouts xPyD to sweep "
                   "(e.g. 1P1D,1P2D,2P1D; off: co-located), --tp GPUs per instance")
    m.add_argument("--quantization", default="auto",
                   help="weight formats: fp8, int4-weight-only, none, auto (the checkpoint's)")
    m.add_argument("--kv-cache-dtype", default="auto",
                   help="KV cache dtypes: auto (bf16), fp8_e4m3, fp8_e5m2, bf16, fp16")
    m.add_argument("--expert-zipf", type=non_negative_float, default=0.0, metavar="S",
                   help="Zipf exponent of expert popularity, for hot experts (0: uniform)")
    m.add_argument("--cost-model", default=None, metavar="NAME|JSON",
                   help=f"{cost_model_names()}, or a calibrated cost model file")
    engine_profile_arguments(m)
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=tuple(GENERATORS), default="sharegpt")
    w.add_argument("--num-requests", type=at_least(MIN_REQUESTS), default=1000,
                   help=f"requests of a rate's first run (at least {MIN_REQUESTS}; more until "
                        f"its window settles, up to {MAX_SCALE}x)")
    w.add_argument("--prompt-len", type=positive_int, default=None, help="as `batchtwin simulate`")
    w.add_argument("--output-len", type=positive_int, default=None, help="as `batchtwin simulate`")
    w.add_argument("--burstiness", type=positive_finite_float, default=1.0,
                   help="gamma shape (1: Poisson)")
    w.add_argument("--num-groups", type=positive_int, default=8,
                   help="shared-prefix: prompt groups")
    w.add_argument("--system-prompt-len", type=non_negative_int, default=2048,
                   help="shared-prefix: system prompt tokens")
    s = p.add_argument_group("objectives and search")
    s.add_argument("--slo", default=DEFAULT_SLO,
                   help="targets {ttft,tpot,itl,e2e}_{mean,p50,p90,p99}=VALUE[s|ms|us], comma "
                        f"separated (default {DEFAULT_SLO})")
    s.add_argument("--seeds", type=positive_int, default=2, help="seeds per rate (all must pass)")
    s.add_argument("--rate-tolerance", type=open_fraction, default=0.05,
                   help="stop when the passing and failing rates are this close (relative)")
    s.add_argument("--target-rate", type=positive_finite_float, default=None, metavar="R",
                   help="report the fewest GPUs that serve R req/s within the SLOs")
    s.add_argument("--gpu-hour-price", default=None, metavar="[KEY=]PRICE,...",
                   help="$ per GPU-hour (one number, or per hardware key): cost per million "
                        "output tokens")
    e = p.add_argument_group("engine knobs (comma lists are swept)")
    for knob, value in (("chunked-prefill-size", "int list or off"),
                        ("max-running-requests", "int list or auto"),
                        ("page-size", "int list"), ("schedule-policy", "names")):
        name = knob.replace("-", "_")
        default = ",".join(NONE_WORDS[name] if v is None else str(v) for v in getattr(d, name))
        e.add_argument(f"--{knob}", default=default, help=f"{value} (default {default})")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="batchtwin-plan", metavar="DIR", help="output folder")
    o.add_argument("--overwrite", action="store_true",
                   help="replace the report of an earlier plan in --out (else refused)")
    o.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: every core; 1 runs serially)")
    o.add_argument("--backend", choices=("process", "ray"), default="process",
                   help="where the runs go: this machine's worker processes (default), or "
                        "tasks on a Ray cluster (pip install -e \".[ray]\")")
    o.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="a running Ray cluster (default: start a local one)")
    o.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from experiments.plan.fleet_choice import parse_prices

    spec, grid = build_plan(args)
    check_output_folder(args.out, "--out", args.overwrite)   # NOTE: before any run
    candidates = grid.candidates()
    check_candidates(spec.model, candidates)
    prices = parse_prices(args.gpu_hour_price, grid.hardware)
    return execute(spec, grid, candidates, args, prices)


def build_plan(args: argparse.Namespace):
    """(PlanSpec, Grid) from the flags; ValueError naming the bad flag."""
    from experiments.plan.point import PlanSpec, WorkloadSpec
    from experiments.plan.slo import SLOTargets

    workload = WorkloadSpec(workload=args.workload, num_requests=args.num_requests,
                            prompt_len=args.prompt_len, output_len=args.output_len,
                            burstiness=args.burstiness, num_groups=args.num_groups,
                            system_prompt_len=args.system_prompt_len)
    from sim.routers import ROUTERS

    if args.router not in ROUTERS:
        raise ValueError(f"--router: unknown policy {args.router!r} (known: {', '.join(ROUTERS)})")
    spec = PlanSpec(args.model, workload, SLOTargets.parse(args.slo),
                    tuple(range(args.seeds)), args.rate_tolerance, expert_zipf=args.expert_zipf,
                    cost_model=args.cost_model, engine_profile=engine_profile_arg(args),
                    router=args.router)
    grid = Grid(parse_list(args.hardware, "--hardware", str),
                parse_list(args.tp, "--tp", int),
                parse_list(args.chunked_prefill_size, "--chunked-prefill-size", int, "off"),
                parse_list(args.max_running_requests, "--max-running-requests", int, "auto"),
                parse_list(args.page_size, "--page-size", int),
                parse_list(args.schedule_policy, "--schedule-policy", str),
                parse_list(args.ep_size, "--ep-size", int),
                parse_list(args.quantization, "--quantization", str, "auto"),
                parse_list(args.kv_cache_dtype, "--kv-cache-dtype", str),
                parse_list(args.dp, "--dp", int),
                parse_list(args.disaggregate, "--disaggregate", str, "off"))
    return spec, grid


def _pool(spec, args: argparse.Namespace):
    """The pool of --backend: this machine's cores ("process") or a Ray cluster ("ray")."""
    address = getattr(args, "ray_address", None)
    if getattr(args, "backend", "process") == "ray":
        from experiments.plan.ray_pool import RayPool
        return RayPool(spec, args.jobs, address)
    if address:
        raise ValueError("--ray-address needs --backend ray")
    from experiments.plan.pool import PointPool
    return PointPool(spec, args.jobs)


def execute(spec, grid: Grid, candidates, args: argparse.Namespace,
            prices: dict[str, float] | None = None) -> int:
    """Search, rank, run the curve of the best, write everything; the exit code."""
    from tqdm import tqdm

    from experiments.plan.fleet_choice import fewest_gpus, target_line
    from experiments.plan.headroom import recommend
    from experiments.plan.search import curve_points, rank, search_rates

    workload = spec.workload.build(1.0, spec.seeds[0], _vocab(spec.model))  # bad flags fail here
    out = Path(args.out)
    quiet = args.no_progress
    with _pool(spec, args) as pool:
        with tqdm(desc=f"plan: search {len(candidates)} configs", unit="run",
                  disable=quiet) as bar:
            outcomes, runs = search_rates(spec, candidates, pool, bar)
        ranked = rank(outcomes, spec.slo)
        best = ranked[0]
        curve, operating = [], None
        if best.feasible:
            with tqdm(desc="plan: curve of the best", unit="run", disable=quiet) as bar:
                curve = pool.run(curve_points(spec, best), bar)
            operating = recommend([*best.at_rate, *curve], best.rate, spec.slo)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale(out, PLAN_FILES)   # NOTE: --overwrite: only this plan's files remain
    prices = prices or {}
    target = getattr(args, "target_rate", None)
    choice = fewest_gpus(ranked, target) if target else None
    config = plan_config(spec, grid, args, workload.config)
    config["target"] = {"rate": target, "gpu_hour_price": prices,
                        "choice": choice.candidate.to_dict() if choice else None}
    config["recommended_rate"] = operating.rate if operating is not None else None
    write_outputs(out, spec, ranked, [*runs, *curve], [*best.at_rate, *curve], config,
                  Target(target, choice, prices), operating)
    print_result(spec, best, out, operating)
    if target:
        print(target_line(choice, target, prices))
        return 0 if choice is not None else EXIT_INFEASIBLE
    return 0 if best.feasible else EXIT_INFEASIBLE


class Target(NamedTuple):
    rate: float | None
    choice: object
    prices: dict[str, float]


def _vocab(model: str) -> int:
    from sim.run.build import load_model

    return load_model(model)[1].vocab_size


def write_outputs(out: Path, spec, ranked, results, curve, config: dict,
                  target: Target | None = None, operating=None) -> None:
    """runs.csv (`results`), sweep.csv, plots (from `curve`, the best's runs around its
    rate, and the Pareto front of every passing run), config.json (`config` and the result)
    and report.md."""
    from experiments.plan.pareto import fleet_points, write_pareto
    from experiments.plan.report import plan_error, render_report, runs_frame, sweep_frame

    target = target or Target(None, None, {})
    best = ranked[0]
    runs_frame(results).to_csv(out / "runs.csv", index=False)
    sweep_frame(ranked, plan_error(spec), target.prices).to_csv(out / "sweep.csv", index=False)
    plots, engine = [], None
    if best.feasible:
        plots, engine = draw(out, spec, best, runs_frame(curve), operating)
    points = fleet_points(results, ranked, target.prices)
    if points:
        plots.append(write_pareto(out, points, bool(target.prices),
                                  f"{spec.model}: every passing rate of every configuration"))
    config = {**config, "best": best.candidate.to_dict() if best.feasible else None,
              "best_rate": best.rate, "best_engine_config": engine}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    files = ["runs.csv", "sweep.csv", "config.json"]
    (out / "report.md").write_text(render_report(spec, ranked, plots, files, target, operating))


def draw(out: Path, spec, best, curve, operating=None):
    """The plots; returns (file names, the best's effective engine config)."""
    from experiments.plan.plots import Marks, write_plots
    from experiments.plan.point import Point, load_engine, requests_of, simulate_point

    point = Point(best.candidate, best.rate, spec.seeds[0], "detail")
    scale = round(best.at_rate[0].metrics.get("num_requests", 0) / requests_of(spec, point))
    run = load_engine(simulate_point(spec, point, max(scale, 1)))   # the seed's settled run
    title = f"{spec.model}, {best.candidate.label}, max rate {format_rate(best.rate)} req/s"
    marks = Marks(best.rate, best.saturation, operating.rate if operating is not None else None)
    plots = write_plots(out, curve, run, spec.slo, marks, title)
    return plots, run.trace.engine_config.to_dict()


def plan_config(spec, grid: Grid, args, generator: dict) -> dict:
    """The exact configuration: flags as given, what they resolved to, the generator's
    parameters (rate and seed vary per run)."""
    from experiments.plan.point import FLOOR_REQUESTS, PROBE_SCALE

    generator = {k: v for k, v in generator.items() if k not in ("rate", "seed")}
    return {"command": "plan", "model": spec.model, "slo": args.slo,
            "objectives": [dataclasses.asdict(o) for o in spec.slo.objectives],
            "workload": dataclasses.asdict(spec.workload), "workload_generator": generator,
            "seeds": list(spec.seeds), "rate_tolerance": spec.rate_tolerance,
            "min_rate_fraction": spec.min_rate_fraction, "expert_zipf": spec.expert_zipf,
            "cost_model": spec.cost_model,
            "engine_profile": dataclasses.asdict(spec.engine_profile) if spec.engine_profile
            else None,
            "probe_scale": PROBE_SCALE,
            "floor_requests": FLOOR_REQUESTS, "jobs": args.jobs, "grid": grid.to_dict(),
            "num_configurations": len(grid.candidates())}


def print_result(spec, best, out: Path, operating=None) -> None:
    from experiments.plan.report import gpus, rate_band

    if best.feasible:
        print(f"best: {best.candidate.label} ({gpus(best.candidate.num_gpus)}) at "
              f"{format_rate(best.rate)} req/s, goodput {format_rate(best.goodput_per_gpu)} "
              f"req/s per GPU ({best.limit.kind} binds)")
        print(f"max rate {rate_band(spec, best.rate)}")
        if operating is not None and operating.rate is not None:
            why = (f"{operating.pressure:.0%} of capacity" if operating.binding == "capacity"
                   else f"{operating.binding} at {operating.pressure:.0%} of its limit")
            print(f"recommended {format_rate(operating.rate)} req/s ({why})")
    else:
        print(f"batchtwin plan: no configuration meets {spec.slo}: {best.limit.reason}",
              file=sys.stderr)
    print(f"wrote {out}/report.md", file=sys.stderr)
