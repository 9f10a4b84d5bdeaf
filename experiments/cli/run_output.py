"""A simulated run's outputs on the command line: its config.json, the printed summary and
the tables written into `--out` (single engines, fleets and disaggregated runs alike)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
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
    print(f"{config['model']} on {ex['tp']}x {ex['hardware']} [{ex['cost_model']}{engine}], "
          f"workload {config['workload']['name']} ({config['workload']['num_requests']} requests)")
    print(f"completed {s['completed']} in {s['duration']:.3f} s simulated, "
          f"{result.num_steps} steps, {s['num_retractions']} retractions, "
          f"{s['cache_hit_tokens']} cache-hit tokens")
    print(f"throughput {s['request_throughput']:.3f} req/s, "
          f"{s['output_throughput']:.1f} output tok/s"
          + (f", goodput {s['goodput']:.3f} req/s" if "goodput" in s else ""))
    print(f"{'ms':>6} {'mean':>10} {'p50':>10} {'p90':>10} {'p99':>10}")
    for name in LATENCY_ROWS:
        cells = (s[f"{name}_{k}"] * 1e3 for k in ("mean", "p50", "p90", "p99"))
        print(f"{name:>6} " + " ".join(f"{v:10.2f}" for v in cells))
    line = bound_line(result)
    if line:
        print(line)


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
