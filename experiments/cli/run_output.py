"""A simulated run's outputs on the command line: its config.json, the printed summary and
the tables written into `--out` (single engines, fleets and disaggregated runs alike)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

from experiments.cli.output_paths import remove_stale

LATENCY_ROWS = ("ttft", "tpot", "itl", "e2e")


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
    w = config["workload"]
    print(f"{config['model']} on {gpus_text(config)} [{ex['cost_model']}{engine}], "
          f"workload {w['name']} ({w['num_requests']} requests{arrivals_text(w)})")
    print(f"completed {s['completed']} in {s['duration']:.3f} s simulated, "
          f"{result.num_steps} steps, {s['num_retractions']} retractions, "
          f"{s['cache_hit_tokens']} cache-hit tokens")
    print(f"throughput {s['request_throughput']:.3f} req/s, "
          f"{s['output_throughput']:.1f} output tok/s"
          + (f", goodput {s['goodput']:.3f} req/s ({s['slo_attainment']:.1%} of the "
             f"completed requests meet the SLO)" if "goodput" in s else ""))
    print_latencies(s)
    line = bound_line(result)
    if line:
        print(line)


def gpus_text(config: dict[str, Any]) -> str:
    """"1x h100", "16 GPUs (4 replicas x tp4, h100)", "6 GPUs (2 prefill + 1 decode
    instances x tp2, h100)": every GPU the run serves on."""
    ex, tp = config["executor"], config["executor"]["tp"]
    if "replicas" in config:
        n = config["replicas"]
        return f"{n * tp} GPUs ({n} replicas x tp{tp}, {ex['hardware']})"
    if "disaggregate" in config:
        prefill, decode = (int(x) for x in config["disaggregate"].lower().rstrip("d").split("p"))
        ptp, dtp = config["prefill_tp"], config["decode_tp"]
        return (f"{prefill * ptp + decode * dtp} GPUs ({prefill} prefill x tp{ptp} + {decode} "
                f"decode x tp{dtp}, {ex['hardware']})")
    return f"{tp}x {ex['hardware']}"


def arrivals_text(workload: dict[str, Any]) -> str:
    """", all arriving at t=0" for a workload without a rate (else "")."""
    rate = (workload.get("config") or {}).get("rate")
    return ", all arriving at t=0: no --rate" if rate is not None and math.isinf(rate) else ""


def print_latencies(s: dict[str, Any]) -> None:
    """The latency table (ms) of a summary."""
    print(f"{'ms':>6} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}")
    for name in LATENCY_ROWS:
        cells = (s[f"{name}_{k}"] * 1e3 for k in ("mean", "p50", "p90", "p99"))
        print(f"{name:>6} " + " ".join(f"{v:10.2f}" for v in cells))


def print_window(result, warmup: float | None) -> None:
    """With `--warmup SECONDS`: the summary of the requests that arrived from then on (the
    measurement window `batchtwin plan` judges a rate on: `shared.trace.window_summary`)."""
    if warmup is None:
        return
    from shared.trace.window_summary import window_summary

    s = window_summary(result, warmup)
    print(f"window: the {s['window_requests']} requests that arrived from {warmup:.6g} s on "
          f"(the warm-up before left out): completed {s['completed']}, throughput "
          f"{s['request_throughput']:.3f} req/s")
    print_latencies(s)


def bound_line(result) -> str:
    """"bound: memory 82% of step time, compute 12%, cpu 6%" ("" when no step has a bound)."""
    from shared.trace.run_result import bound_shares

    shares = [f"{name} {share:.0%}" for name, share in bound_shares(result).items()]
    if not shares:
        return ""
    return f"bound: {shares[0]} of step time" + "".join(f", {s}" for s in shares[1:])


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
