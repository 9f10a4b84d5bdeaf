"""`batchtwin fidelity`: how well the simulator predicts the real executor on this machine.

    batchtwin fidelity [--cost-model batchtwin-calibration/cost_model.json] [--runs 3] \
        [--num-requests 40] [--rate 2] [--out batchtwin-fidelity]

Without `--cost-model` it calibrates first on the same engine (`batchtwin calibrate`'s grids,
written to --out/calibration); `--recalibrate` calibrates again before every run (one pass,
--out/calibration-run<k>), for hosts whose speed drifts between runs. The engine runs with
mixed chunks and 1024-token chunks (the calibration engine's config). Per run, a real
online workload (SmolLM2-135M by default, a tiny random model when it
is not installed) and the same workload in the simulator (experiments.calibration.fidelity has the
protocol). Writes `report.md`, `fidelity.json` (configuration, per-run and median figures),
`latencies.csv`, `steps.csv` (teacher-forced steps) and two plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

from experiments.calibration import calibrate_cmd
from experiments.calibration.config import CalibrationConfig
from experiments.calibration.fidelity import (
    FidelityWorkload,
    latency_table,
    medians,
    run_fidelity,
)
from experiments.cli.arg_types import non_negative_float, positive_float, positive_int, seed
from experiments.cli.errors import UsageError
from sim.cost.calibrated import CalibratedCostModel

HELP = "measure the simulator against the real executor (teacher forced and free running)"
BARS = {"teacher_forced_median_ape": 0.05, "teacher_forced_mape": 0.10,
        **{f"{m}_{p}_error": 0.10 for m in ("ttft", "tpot", "e2e") for p in ("p50", "p90")}}


def configure(p: argparse.ArgumentParser) -> None:
    w = FidelityWorkload()
    p.add_argument("--model", default=None,
                   help="checkpoint folder or .gguf (default: SmolLM2-135M, else a tiny random model)")
    p.add_argument("--cost-model", default=None, metavar="JSON",
                   help="one calibrated cost model for every run (default: calibrate first)")
    p.add_argument("--recalibrate", action="store_true",
                   help="calibrate again (one pass) before every run")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--dtype", default="auto", choices=calibrate_cmd.DTYPES,
                   help=calibrate_cmd.DTYPE_HELP)
    p.add_argument("--threads", type=positive_int, default=CalibrationConfig.threads,
                   help="torch threads, fixed for the whole run (as for calibrate)")
    p.add_argument("--runs", type=positive_int, default=3)
    p.add_argument("--num-requests", type=positive_int, default=w.traffic.num_requests)
    p.add_argument("--rate", type=positive_float, default=w.rate, help="requests/s (Poisson)")
    p.add_argument("--prompt-median", type=positive_float, default=w.traffic.prompt_median)
    p.add_argument("--output-median", type=positive_float, default=w.traffic.output_median)
    p.add_argument("--max-total-tokens", type=positive_int,
                   default=CalibrationConfig.max_total_tokens,
                   help=f"KV capacity of the engine in tokens (at least "
                        f"{CalibrationConfig.chunk_size}, one prefill chunk)")
    p.add_argument("--temperature", type=non_negative_float,
                   default=w.temperature,
                   help="sampling temperature of the workload and of the calibration (0: greedy)")
    p.add_argument("--seed", type=seed, default=w.seed)
    p.add_argument("--out", default="batchtwin-fidelity", metavar="DIR")


def run(args: argparse.Namespace) -> int:
    _check(args)
    from exec.device.torch_device import checked_device  # NOTE: torch
    from experiments.calibration.run import calibration_engine, resolve_dtype, resolve_model

    dtype = resolve_dtype(args.dtype, checked_device(args.device))
    fixed = None if args.cost_model is None else CalibratedCostModel.load(args.cost_model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    c = CalibrationConfig(model=args.model, device=args.device, dtype=dtype,
                          threads=args.threads, max_total_tokens=args.max_total_tokens,
                          seed=args.seed, temperature=args.temperature)
    traffic = dataclasses.replace(FidelityWorkload().traffic, num_requests=args.num_requests,
                                  prompt_median=args.prompt_median,
                                  output_median=args.output_median)
    spec = FidelityWorkload(traffic, args.rate, args.seed, args.temperature)
    model = resolve_model(c.model, out)
    engine = calibration_engine(c, model)
    models: list[CalibratedCostModel] = []

    def cost_for_run(k: int) -> CalibratedCostModel:
        if fixed is not None:
            return fixed
        if args.recalibrate or not models:
            one_pass = dataclasses.replace(c, repeats=1, online_requests=0) if args.recalibrate else c
            where = f"calibration-run{k + 1}" if args.recalibrate else "calibration"
            models.append(_calibrate(engine, one_pass, model, out / where))
        return models[-1]

    runs = run_fidelity(engine, cost_for_run, spec, args.runs)
    write(out, runs, {"calibration": asdict(c), "workload": spec.to_dict(), "runs": args.runs,
                      "cost_models": [m.to_dict() for m in models or [fixed]]})
    print((out / "report.md").read_text())
    return 0


def _check(args: argparse.Namespace) -> None:
    """UsageError for flags out of range together (argparse checks each on its own)."""
    chunk = CalibrationConfig.chunk_size
    if args.max_total_tokens < chunk:
        raise UsageError(f"--max-total-tokens must be at least {chunk} (one prefill chunk of "
                         f"the calibration engine), got {args.max_total_tokens}")
    if args.cost_model is not None and not Path(args.cost_model).is_file():
        raise UsageError(f"cost model file {args.cost_model} does not exist "
                         f"(run `batchtwin calibrate`)")


def _calibrate(engine, c: CalibrationConfig, model: str, out: Path) -> CalibratedCostModel:
    from experiments.calibration.run import calibrate_engine

    result = calibrate_engine(engine, c, model)
    calibrate_cmd.write(result, c, out)
    print(calibrate_cmd.summary_text(result, out))
    return result.cost_model


def write(out: Path, runs, config: dict) -> None:
    import pandas as pd

    from experiments.calibration.fidelity_plots import (  # NOTE: matplotlib
        plot_latencies,
        plot_step_times,
    )

    med = medians(runs)
    (out / "fidelity.json").write_text(json.dumps(
        {"config": config, "medians": med, "runs": [r.errors for r in runs]}, indent=2))
    pd.DataFrame(latency_table(runs)).to_csv(out / "latencies.csv", index=False)
    pd.concat([r.replay.steps.assign(run=i) for i, r in enumerate(runs)]).to_csv(
        out / "steps.csv", index=False)
    plot_step_times(runs, out / "step_times.png")
    plot_latencies(runs[0], out / "latencies.png")
    (out / "report.md").write_text(report(med, runs, config))


def report(med: dict[str, float], runs, config: dict) -> str:
    w = config["workload"]
    lines = [f"# Fidelity: simulator against the real executor ({len(runs)} runs, medians)", "",
             f"Workload: {w['num_requests']} ShareGPT-like requests (prompt median "
             f"{w['prompt_median']:.0f}, output median {w['output_median']:.0f}) at {w['rate']}/s "
             f"(Poisson), {config['calibration']['dtype']}, {config['calibration']['threads']} threads.",
             "", "| figure | median over runs | bar | met |", "|---|---|---|---|"]
    for key, value in med.items():
        bar = BARS.get(key)
        met = "" if bar is None else ("yes" if value <= bar else "**no**")
        lines.append(f"| {key} | {value:.3f} | {'' if bar is None else f'<= {bar:.2f}'} | {met} |")
    lines += ["", "Per run and percentile (seconds):", "", "| run | metric | real | sim | error |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['run'] + 1} | {r['metric']} | {r['real_s']:.4f} | {r['sim_s']:.4f} | "
              f"{r['error']:.1%} |" for r in latency_table(runs)]
    lines += ["", "Plots: step_times.png (teacher forced), latencies.png (free running).", ""]
    return "\n".join(lines)
