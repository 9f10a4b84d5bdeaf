"""`batchtwin replay`: re-run a recorded trace teacher-forced (`sim.run.replay`) and report how
much of the schedule the spec reproduces and how well a cost model prices the recorded steps.

    batchtwin replay run.jsonl                       # a sim trace: the cost model it ran with
    batchtwin replay run.jsonl --cost-model roofline # ... or another one on its hardware
    batchtwin replay exec.jsonl --fit                # an exec trace: a model fitted to it
    batchtwin replay exec.jsonl --hardware h100      # ... or the default cost model on a chip

Writes a plot of predicted against measured step time (PNG, next to the trace unless
`--plot` says where; `--no-plot` skips it) and, with `--steps-csv`, the per-step table. Both
paths are checked before the replay: their folder must exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.cli.arg_types import positive_int
from experiments.cli.errors import UsageError
from experiments.cli.flags import cost_model_names
from experiments.cli.output_paths import check_output_file

HELP = "replay a trace teacher-forced: schedule agreement and step-time error of a cost model"
EXIT_DIVERGED = 3


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", metavar="TRACE.jsonl", help="a batchtwin trace (sim or exec)")
    c = p.add_argument_group("cost model (default: the one the trace's header names, on its "
                             "model and hardware)")
    g = c.add_mutually_exclusive_group()
    c.add_argument("--cost-model", default=None, metavar="NAME|JSON",
                   help=f"{cost_model_names()}, on the trace's hardware (or --hardware's), "
                        f"or a calibrated cost model file")
    g.add_argument("--hardware", default=None, metavar="KEY",
                   help="price on this catalogue key or hardware JSON (for exec traces)")
    g.add_argument("--fit", action="store_true",
                   help="fit a calibrated model to this trace's own steps (in-sample error)")
    c.add_argument("--tp", type=positive_int, default=None,
                   help="tensor-parallel degree with --hardware")
    o = p.add_argument_group("output")
    o.add_argument("--plot", default=None, metavar="PNG",
                   help="plot path (default: TRACE-replay.png beside the trace)")
    o.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    o.add_argument("--steps-csv", default=None, metavar="CSV", help="write the per-step table")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--strict", action="store_true",
                   help=f"exit {EXIT_DIVERGED} unless every step agrees")


def run(args: argparse.Namespace) -> int:
    from shared.trace.trace import Trace
    from sim.run.replay import replay

    if args.tp is not None and args.hardware is None:
        raise UsageError("--tp goes with --hardware")
    trace = Trace.load(args.trace)
    plot_path = None if args.no_plot else check_output_file(
        args.plot or default_plot_path(args.trace), "--plot")
    if args.steps_csv:
        check_output_file(args.steps_csv, "--steps-csv")
    model, described = cost_model(args, trace)
    result = replay(trace, model)
    summary = summarize(args.trace, trace, result, described)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    if args.steps_csv:
        result.steps.to_csv(args.steps_csv, index=False)
    if plot_path is not None:
        plot(result, plot_path, title=f"{Path(args.trace).name}: {described}")
        print(f"wrote {plot_path}", file=sys.stderr)
    return EXIT_DIVERGED if args.strict and result.first_divergence is not None else 0


def cost_model(args: argparse.Namespace, trace):
    """(CostModel, a description) from the flags: a calibrated file, a fit, or a named model
    (None: the header's) on the trace's hardware or --hardware's."""
    from sim.cost.calibrated import CalibratedCostModel
    from sim.cost.registry import COST_MODELS, CostInputs, build_cost_model
    from sim.hardware.lookup import get_hardware
    from sim.model.from_config import get_model_shape
    from sim.run.replay import default_cost_model

    name = args.cost_model
    if args.fit and name:
        raise UsageError("--fit fits its own model: drop --cost-model")
    if name and name not in COST_MODELS:
        if args.hardware:
            raise UsageError("--hardware prices with a named cost model; a calibrated file "
                             "holds its own prices")
        return CalibratedCostModel.load(name), f"calibrated ({name})"
    if args.fit:
        return CalibratedCostModel.fit(trace.steps), "calibrated (fitted to this trace)"
    if args.hardware:
        if not trace.model_config:
            raise ValueError("the trace header holds no model config.json to price")
        hw, tp = get_hardware(args.hardware), args.tp or 1
        model = build_cost_model(name, CostInputs(get_model_shape(trace.model_config), hw, tp))
        return model, model.describe()
    model = default_cost_model(trace, name)
    return model, model.describe()


def summarize(path: str, trace, result, described: str) -> dict:
    first = result.first_divergence
    return {
        "trace": str(path), "executor": trace.executor, "steps": len(result.steps),
        "requests": len(trace.requests), "agree_fraction": result.agree_fraction,
        "first_divergence": first,
        "first_divergence_field": None if first is None else result.steps["diff_field"].iloc[first],
        "cost_model": described, "mape": result.mape, "median_ape": result.median_ape,
        "measured_total_s": float(result.steps["measured"].sum()),
        "predicted_total_s": float(result.steps["predicted"].sum()),
    }


def format_summary(s: dict) -> str:
    first = ("none" if s["first_divergence"] is None
             else f"step {s['first_divergence']} ({s['first_divergence_field']})")
    return "\n".join((
        f"{s['trace']}: {s['steps']} steps, {s['requests']} requests, executor {s['executor']}",
        f"schedule: {s['agree_fraction']:.2%} of steps re-scheduled identically; "
        f"first divergence: {first}",
        f"step time [{s['cost_model']}]: MAPE {s['mape']:.2%}, median APE {s['median_ape']:.2%}; "
        f"total {s['predicted_total_s']:.4f} s predicted vs {s['measured_total_s']:.4f} s measured",
    ))


def default_plot_path(trace_path: str) -> Path:
    p = Path(trace_path)
    return p.with_name(p.name.removesuffix(".jsonl") + "-replay.png")


def plot(result, path: Path, title: str) -> None:
    """Predicted against measured step time (ms; log-log when they span decades), y = x
    dashed; steps whose schedule diverged in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = result.steps
    ms_m, ms_p = df["measured"] * 1e3, df["predicted"] * 1e3
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ok = df["agree"]
    ax.scatter(ms_m[ok], ms_p[ok], s=8, alpha=0.6, label="schedule agrees")
    if (~ok).any():
        ax.scatter(ms_m[~ok], ms_p[~ok], s=8, alpha=0.8, color="tab:red", label="schedule diverged")
    positive = [v for v in (*ms_m, *ms_p) if v > 0]
    lo, hi = (min(positive), max(positive)) if positive else (1e-3, 1.0)
    ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="predicted = measured")
    if hi > 20 * lo:  # log axes only when step times span decades
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"{title}\nMAPE {result.mape:.1%}, median APE {result.median_ape:.1%}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
