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
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from experiments.arg_types import non_negative_float, non_negative_int, positive_int
from experiments.cli_errors import UsageError
from experiments.output_paths import check_output_folder, remove_stale
from experiments.simulate_fleet_cmd import (
    fleet_arguments,
    is_fleet,
    run_disaggregated,
    run_fleet,
)
from experiments.workload_flags import make_workload, workload_arguments

HELP = "simulate serving a workload on a model and hardware (SimPy + cost model, no GPU)"
LATENCY_ROWS = ("ttft", "tpot", "itl", "e2e")
OUTPUT_FILES = ("requests.parquet", "requests.csv", "steps.parquet", "steps.csv", "config.json",
                "summary.json", "trace.jsonl")


def configure(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model and hardware")
    m.add_argument("--model", default="llama-3-8b", help="embedded key or config.json path")
    m.add_argument("--hardware", default="h100", help="catalogue key or hardware JSON path")
    m.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree")
    parallelism_arguments(m)
    m.add_argument("--cost-model", default=None, metavar="NAME|JSON",
                   help="roofline (default), kernel (kernel-level: GEMM shapes, NCCL "
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
    for name in ("ttft", "tpot", "e2e"):
        o.add_argument(f"--slo-{name}", type=float, default=None, metavar="S",
                       help=f"{name.upper()} objective in seconds (adds goodput)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")


def parallelism_arguments(g: argparse._ArgumentGroup) -> None:
    """--ep-size, --dp-size, --enable-dp-attention, --quantization, --kv-cache-dtype
    (SGLang's names) and --expert-zipf."""
    from sim.hardware.precision import KV_CACHE_DTYPES, QUANTIZATIONS
    from sim.model.ep_options import A2A_BACKENDS

    g.add_argument("--ep-size", type=positive_int, default=1,
                   help="expert-parallel degree (MoE models; divides --tp and the experts)")
    g.add_argument("--dp-size", "--dp", type=positive_int, default=1,
                   help="with --enable-dp-attention: attention ranks over the --tp GPUs; "
                        "without it: engine replicas, each on its own --tp GPUs, behind "
                        "--router (simulate)")
    g.add_argument("--enable-dp-attention", action="store_true",
                   help="SGLang's attention data parallelism: --dp-size attention ranks over "
                        "the --tp GPUs, MLP and experts over all of them (needs --cost-model "
                        "kernel)")
    g.add_argument("--moe-a2a-backend", choices=A2A_BACKENDS, default="none",
                   help="deepep: dispatch each token to its experts' GPUs (with attention DP)")
    g.add_argument("--moe-dense-tp-size", type=positive_int, choices=(1,), default=None,
                   help="1: dense MLPs and shared experts data-parallel (with attention DP)")
    g.add_argument("--enable-dp-lm-head", action="store_true",
                   help="each attention rank computes its own rows' logits")
    g.add_argument("--enable-two-batch-overlap", action="store_true",
                   help="hide the expert all-to-all under the other micro-batch's compute")
    g.add_argument("--ep-num-redundant-experts", type=non_negative_int, default=0,
                   help="EPLB's extra expert copies (E + R must divide by --ep-size)")
    g.add_argument("--quantization", choices=tuple(QUANTIZATIONS), default=None,
                   help="weight format (default: the checkpoint's quantization_config, else "
                        "bf16); fp8 needs hardware with an fp8 peak, nvfp4 (modelopt_fp4) "
                        "one with an fp4 peak (b200)")
    g.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto",
                   help="KV cache dtype (auto: bf16)")
    g.add_argument("--expert-zipf", type=non_negative_float, default=0.0, metavar="S",
                   help="Zipf exponent of expert popularity, for hot experts (0: uniform)")


def engine_profile_arguments(g: argparse._ArgumentGroup) -> None:
    """--engine-profile and vLLM's --num-scheduler-steps."""
    from sim.cost.engine_profile import ENGINE_PROFILES

    g.add_argument("--engine-profile", choices=tuple(ENGINE_PROFILES), default=None,
                   help="the engine simulated: its CPU time per step and request (kernel cost "
                        "model), its default schedule (sglang, trt-llm: overlap; vllm, "
                        "lmdeploy: none) and admission (trt-llm: guaranteed no evict); "
                        "default sglang")
    g.add_argument("--num-scheduler-steps", type=positive_int, default=1,
                   help="vLLM's multi-step scheduling: decode steps per scheduling pass "
                        "(with --engine-profile vllm)")


def engine_profile_arg(args: argparse.Namespace):
    """The `engine_profile` keyword of engine_profile_arguments' flags (None: the default);
    UsageError for --num-scheduler-steps on an engine without multi-step scheduling."""
    from sim.cost.engine_profile import get_engine_profile

    if args.num_scheduler_steps == 1:
        return args.engine_profile
    if args.engine_profile != "vllm":
        raise UsageError(f"--num-scheduler-steps {args.num_scheduler_steps} is vLLM's "
                         f"multi-step scheduling; add --engine-profile vllm")
    return get_engine_profile("vllm").with_scheduler_steps(args.num_scheduler_steps)


def parallelism_args(args: argparse.Namespace) -> dict[str, Any]:
    """The `sim.run.simulate.simulate` keywords of parallelism_arguments' flags."""
    from sim.model.ep_options import EPOptions

    options = EPOptions(args.moe_a2a_backend, args.moe_dense_tp_size, args.enable_dp_lm_head,
                        args.enable_two_batch_overlap, args.ep_num_redundant_experts)
    return {"ep_size": args.ep_size, "dp_size": args.dp_size,
            "enable_dp_attention": args.enable_dp_attention, "ep_options": options,
            "quantization": args.quantization,
            "kv_cache_dtype": args.kv_cache_dtype, "expert_zipf": args.expert_zipf}


def engine_arguments(g: argparse._ArgumentGroup) -> None:
    """One flag per EngineConfig field (their annotations are strings: 'int | None', ...)."""
    from shared.config.engine_config import EngineConfig

    for f in dataclasses.fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = str(f.type)
        if kind == "bool":
            g.add_argument(flag, action="store_true", default=None)
        else:
            convert = int if "int" in kind else float if "float" in kind else str
            g.add_argument(flag, type=convert, default=None, help=f"default: {f.default}")


def run(args: argparse.Namespace) -> int:
    from shared.trace.run_result import SLO
    from sim.run.simulate import load_model, simulate

    if args.save_trace and not args.out:
        raise UsageError("--save-trace writes into --out; give --out DIR")
    if args.out:
        check_output_folder(args.out, "--out", args.overwrite)
    _, shape = load_model(args.model)
    workload = make_workload(args, shape.vocab_size)
    run_args = {"model": args.model, "hardware": args.hardware, "tp": args.tp,
                **parallelism_args(args), "cost_model": args.cost_model,
                "engine_profile": engine_profile_arg(args), "seed": args.seed,
                "slo": _slo(args, SLO), "progress": not args.no_progress, **engine_args(args)}
    if args.disaggregate:
        return run_disaggregated(args, workload, run_args)
    if is_fleet(args):
        return run_fleet(args, workload, run_args)
    result = simulate(workload, **run_args)
    config = run_config(args, workload, result.trace, result.slo)
    print_summary(config, result)
    if args.out:
        write_outputs(Path(args.out), config, result, args.save_trace)
    return 0


def engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """The EngineConfig fields given on the command line."""
    from shared.config.engine_config import EngineConfig

    names = (f.name for f in dataclasses.fields(EngineConfig))
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def _slo(args: argparse.Namespace, slo_cls):
    limits = {n: getattr(args, f"slo_{n}") for n in ("ttft", "tpot", "e2e")}
    return slo_cls(**limits) if any(v is not None for v in limits.values()) else None


def run_config(args: argparse.Namespace, workload, trace, slo, **extra: Any) -> dict[str, Any]:
    """config.json of a run: the workload, model, executor and effective engine config of
    `trace` (a fleet's or a disaggregated run's first), the SLO, and `extra` fields."""
    return {"command": "simulate", "workload": {"name": workload.name, "config": workload.config,
                                                "num_requests": len(workload),
                                                "file": args.workload_file},
            "model": args.model, "executor": trace.executor, "seed": args.seed, **extra,
            "engine_config": trace.engine_config.to_dict(),
            "model_info": trace.model_info.to_dict(),
            "slo": dataclasses.asdict(slo) if slo else None}


def print_summary(config: dict[str, Any], result) -> None:
    s, ex = result.summary, config["executor"]
    engine = f", {ex['engine_profile']['name']} engine" if "engine_profile" in ex else ""
    print(f"{config['model']} on {ex['tp']}x {ex['hardware']} [{ex['cost_model']}{engine}], "
          f"workload {config['workload']['name']} ({config['workload']['num_requests']} requests)")
    print(f"completed {s['completed']} in {s['duration']:.3f} s simulated, "
          f"{len(result.steps)} steps, {s['num_retractions']} retractions, "
          f"{s['cache_hit_tokens']} cache-hit tokens")
    print(f"throughput {s['request_throughput']:.3f} req/s, "
          f"{s['output_throughput']:.1f} output tok/s"
          + (f", goodput {s['goodput']:.3f} req/s" if "goodput" in s else ""))
    print(f"{'ms':>6} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}")
    for name in LATENCY_ROWS:
        cells = (s[f"{name}_{k}"] * 1e3 for k in ("mean", "p50", "p90", "p99"))
        print(f"{name:>6} " + " ".join(f"{v:10.2f}" for v in cells))
    line = bound_line(result.steps)
    if line:
        print(line)


def bound_line(steps) -> str:
    """"bound: memory 82% of step time, compute 12%, cpu 6%" ("" when no step has a bound)."""
    from shared.trace.run_result import bound_shares

    shares = [f"{name} {share:.0%}" for name, share in bound_shares(steps).items()]
    if not shares:
        return ""
    return f"bound: {shares[0]} of step time" + "".join(f", {s}" for s in shares[1:])


def write_outputs(out: Path, config: dict[str, Any], result, save_trace: bool) -> None:
    traces = {"trace.jsonl": result.trace} if save_trace else {}
    write_tables(out, {"requests": result.requests, "steps": result.steps}, config,
                 result.summary, OUTPUT_FILES, traces)


def write_tables(out: Path, frames: dict[str, Any], config: dict[str, Any],
                 summary: dict[str, Any], stale: tuple[str, ...],
                 traces: dict[str, Any] | None = None) -> None:
    """Into `out` (created; the `stale` names of an earlier run removed): each frame as
    Parquet when pyarrow is importable, else CSV; config.json, summary.json; the traces."""
    out.mkdir(parents=True, exist_ok=True)
    remove_stale(out, stale)
    parquet = importlib.util.find_spec("pyarrow") is not None
    for name, frame in frames.items():
        if parquet:
            frame.to_parquet(out / f"{name}.parquet", index=False)
        else:
            frame.to_csv(out / f"{name}.csv", index=False)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for name, trace in (traces or {}).items():
        trace.save(out / name)
    print(f"wrote {out}/", file=sys.stderr)
