"""The PNG plots of a `batchtwin plan` report (matplotlib, Agg backend).

Curves against rate average the seeds at each rate; the time series come from one run (the
chosen configuration at the chosen rate, first seed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from experiments.plan.headroom import HEADROOM
from experiments.plan.limits import active_tokens
from experiments.plan.slo import SLOTargets, format_rate

PLOTS = {"latency": "latency_vs_rate.png", "goodput": "goodput_vs_rate.png",
         "kv": "kv_usage.png", "batch": "batch_composition.png"}
TIME_BINS = 120


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class Marks(NamedTuple):
    """The rates the plots against rate mark: the max rate, the saturation throughput (above
    it shaded: a finite run there may meet the SLOs, a long one would not) and the
    recommended operating point (None: none)."""

    rate: float
    saturation: float
    recommended: float | None = None


def write_plots(out: Path, curve: Any, run: Any, slo: SLOTargets, marks: Marks,
                title: str) -> list[str]:
    """All four plots into `out`; returns their file names. `curve`: one row per run
    (rate, metrics); `run`: the RunResult at the max rate."""
    plt = _pyplot()
    mean = curve.groupby("rate").mean(numeric_only=True).sort_index()
    for key, draw in (("latency", lambda: latency_vs_rate(plt, mean, slo, marks)),
                      ("goodput", lambda: goodput_vs_rate(plt, curve, mean, marks)),
                      ("kv", lambda: kv_usage(plt, run)),
                      ("batch", lambda: batch_composition(plt, run))):
        fig = draw()
        fig.suptitle(f"{title}", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / PLOTS[key], dpi=110)
        plt.close(fig)
    return list(PLOTS.values())


def mark_rates(ax, marks: Marks) -> None:
    """The max rate, the recommended operating point, the region above saturation."""
    ax.axvline(marks.rate, color="black", lw=1.2, ls="-.",
               label=f"max rate {format_rate(marks.rate)}")
    if marks.recommended is not None:
        ax.axvline(marks.recommended, color="green", lw=2,
                   label=f"recommended {format_rate(marks.recommended)}")
    ax.axvspan(marks.saturation, max(ax.get_xlim()[1], marks.saturation), color="gray",
               alpha=0.15, label="above saturation")


def latency_vs_rate(plt, mean: Any, slo: SLOTargets, marks: Marks):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        for stat, style in (("p50", ":"), ("p90", "-"), ("p99", "--")):
            ax.plot(mean.index, mean[f"{metric}_{stat}"] * 1e3, style, marker="o", ms=3,
                    label=stat)
        for o in slo.objectives:
            if o.metric == metric:
                ax.axhline(o.limit * 1e3, color="red", lw=2, label=f"SLO limit ({o.stat})")
                ax.axhline(o.limit * HEADROOM * 1e3, color="red", lw=1, ls=":",
                           label=f"{HEADROOM:.0%} of the limit")
        mark_rates(ax, marks)
        ax.set(xlabel="request rate (req/s)", ylabel=f"{metric.upper()} (ms)",
               yscale="log" if metric == "ttft" else "linear",
               title=f"{metric.upper()} against rate (mean of seeds)")
        ax.legend(fontsize=8)
    return fig


def goodput_vs_rate(plt, curve: Any, mean: Any, marks: Marks):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    top = float(mean.index.max())
    ax.plot([0, top], [0, top], color="lightgray", lw=1, label="every request meets the SLOs")
    ax.plot(mean.index, mean["goodput"], marker="o", label="goodput (rate x attainment)")
    missed = curve[~curve["passed"].astype(bool)]
    ax.scatter(missed["rate"], missed["goodput"], marker="x", color="red", zorder=3,
               label="a run missing the SLOs")
    ax.set(xlabel="request rate (req/s)", ylabel="goodput (req/s)", xlim=(0, top * 1.02),
           ylim=(0, top * 1.05), title="goodput against rate")
    mark_rates(ax, marks)
    ax.legend(fontsize=8)
    return fig


def kv_usage(plt, run: Any):
    steps, capacity = run.steps, run.trace.engine_config.max_total_tokens
    decode = (steps["forward_mode"] == "DECODE").to_numpy()
    t = steps["start_time"].to_numpy()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.plot(t, steps["kv_used_tokens"] / capacity * 100, lw=0.8,
            label="KV slots in use (running requests + prefix cache)")
    ax.plot(t[decode], active_tokens(run.trace)[decode] / capacity * 100, lw=0.8,
            label="held by running requests (decode steps)")
    ax.axhline(100, color="red", lw=1, label=f"capacity ({capacity} tokens)")
    ax.set(xlabel="simulated time (s)", ylabel="% of KV capacity", ylim=(0, 110),
           title="KV cache usage at the chosen rate")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def batch_composition(plt, run: Any):
    steps = run.steps
    t = steps["start_time"].to_numpy()
    decode = (steps["forward_mode"] == "DECODE").to_numpy()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t[decode], steps["batch_size"].to_numpy()[decode], lw=0.8,
             label="running requests (decode batch)")
    top.plot(t, steps["queue_len"], lw=0.8, label="waiting requests")
    top.set(ylabel="requests", title="batch composition at the chosen rate")
    top.legend(fontsize=8)
    edges = np.linspace(t.min(), (t + steps["duration"].to_numpy()).max(), TIME_BINS + 1)
    tokens = steps["num_tokens"].to_numpy()
    prefill = np.histogram(t[~decode], edges, weights=tokens[~decode])[0]
    decoded = np.histogram(t[decode], edges, weights=tokens[decode])[0]
    width = np.diff(edges)
    bottom.stackplot(edges[:-1], prefill / width, decoded / width,
                     labels=["prefill tokens (EXTEND/MIXED)", "decode tokens"], step="post")
    bottom.set(xlabel="simulated time (s)", ylabel="tokens/s")
    bottom.legend(fontsize=8)
    return fig
