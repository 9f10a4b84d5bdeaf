"""`batchtwin simulate`: serve a seeded workload on a simulated model and hardware (the SimPy
driver and a cost model; no model runs) and print its serving metrics.

    batchtwin simulate --model llama-3-8b --hardware h100 --workload sharegpt \
        --num-requests 1000 --rate 20 --out results/sim-h100
    batchtwin simulate --model deepseek-v3 --hardware h200 --tp 8 --ep-size 8 \
        --quantization fp8 --num-requests 1000 --rate 10

With `--out`, writes requests and steps (Parquet when pyarrow is importable, else CSV), the
run's configuration (config.json: workload, model, hardware, cost model, the effective engine
config) and summary.json; `--save-trace` adds the full step trace (trace.jsonl, replayable).
`--out` is created when absent; a folder that already holds files is refused before the run
unless `--overwrite` is given, which replaces the files of an earlier run (an existing file
is always refused).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.arg_types import non_negative_float, positive_int
from experiments.cli.errors import UsageError
from experiments.cli.flags import (
    cost_model_names,
    deployment,
    engine_arguments,
    engine_profile_arguments,
    parallelism_arguments,
)
from experiments.cli.output_paths import check_output_folder
from experiments.cli.run_output import print_summary, print_window, run_config, write_tables
from experiments.cli.workload_flags import make_workload, workload_arguments
from experiments.simulate_fleet import (
    fleet_arguments,
    is_fleet,
    run_disaggregated,
    run_fleet,
)

HELP = "simulate serving a workload on a model and hardware (SimPy + cost model, no GPU)"
OUTPUT_FILES = ("requests.parquet", "requests.csv", "steps.parquet", "steps.csv", "config.json",
                "summary.json", "trace.jsonl")


def configure(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model and hardware")
    m.add_argument("--model", default="llama-3-8b", help="embedded key or config.json path")
    m.add_argument("--hardware", default="h100", help="catalogue key or hardware JSON path")
    m.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree")
    parallelism_arguments(m)
    m.add_argument("--cost-model", default=None, metavar="NAME|JSON",
                   help=f"{cost_model_names()} (kernel: kernel-level, GEMM shapes, NCCL "
                        "alpha-beta, CPU time), or a calibrated cost model file")
    engine_profile_arguments(m)
    fleet_arguments(m)
    workload_arguments(p.add_argument_group("workload"))
    engine_arguments(p.add_argument_group("engine (EngineConfig fields)"))
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, metavar="DIR",
                   help="folder for the tables, config.json and summary.json (created; refused "
                        "when it already holds files, unless --overwrite)")
    o.add_argument("--overwrite", action="store_true",
                   help="let --out replace the results of an earlier run in its folder")
    o.add_argument("--save-trace", action="store_true", help="also write trace.jsonl to --out")
    for name in ("ttft", "tpot", "e2e", "max-itl"):
        what = "each gap between a request's tokens" if name == "max-itl" else name.upper()
        o.add_argument(f"--slo-{name}", type=float, default=None, metavar="S",
                       help=f"{what}: objective in seconds (adds goodput and SLO attainment)")
    o.add_argument("--warmup", type=non_negative_float, default=None, metavar="S",
                   help="also print the summary of the requests arriving from S seconds on "
                        "(the window `batchtwin plan` measures; keeps the run's trace)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from shared.trace.run_result import SLO
    from sim.run.build import load_model
    from sim.run.simulate import simulate

    if args.save_trace and not args.out:
        raise UsageError("--save-trace writes into --out; give --out DIR")
    if args.out:
        check_output_folder(args.out, "--out", args.overwrite)
    _, shape = load_model(args.model)
    workload = make_workload(args, shape.vocab_size)
    dep = deployment(args)
    run_args = {"seed": args.seed, "slo": _slo(args, SLO), "progress": not args.no_progress}
    if args.disaggregate:
        return run_disaggregated(args, workload, dep, run_args)
    if is_fleet(args):
        return run_fleet(args, workload, dep, run_args)
    # NOTE: what the run keeps follows the outputs asked for (--out: the steps table;
    # --save-trace: the trace, written as the run goes); the summary holds no per-step memory
    trace_file = Path(args.out) / "trace.jsonl" if args.save_trace else None
    if trace_file is not None:
        trace_file.parent.mkdir(parents=True, exist_ok=True)
    result = simulate(workload, dep, keep_steps=bool(args.out), save_trace=trace_file,
                      keep_trace=args.warmup is not None, **run_args)
    config = run_config(args, workload, result.run_info, result.slo)
    print_summary(config, result)
    print_window(result, args.warmup)
    if args.out:
        write_outputs(Path(args.out), config, result, args.save_trace)
    return 0


def _slo(args: argparse.Namespace, slo_cls):
    limits = {n: getattr(args, f"slo_{n}") for n in ("ttft", "tpot", "e2e", "max_itl")}
    return slo_cls(**limits) if any(v is not None for v in limits.values()) else None


def write_outputs(out: Path, config: dict[str, Any], result, save_trace: bool) -> None:
    # NOTE: with --save-trace the run wrote trace.jsonl as it went: not stale
    stale = tuple(n for n in OUTPUT_FILES if not (save_trace and n == "trace.jsonl"))
    write_tables(out, {"requests": result.requests, "steps": result.steps}, config,
                 result.summary, stale)


