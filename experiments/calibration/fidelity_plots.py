"""Plots of `batchtwin fidelity`: predicted against measured, per step and per request."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from experiments.calibration.fidelity import LATENCIES, RunFidelity


def plot_step_times(runs: list[RunFidelity], path: Path) -> None:
    """Teacher forcing: each recorded step's measured time against the cost model's price."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for i, r in enumerate(runs):
        modes = np.array([s.forward_mode for s in r.real.trace.steps])
        steps = r.replay.steps
        for mode, marker in (("DECODE", "o"), ("EXTEND", "s"), ("MIXED", "^")):
            m = modes == mode
            if m.any():
                ax.scatter(steps["measured"][m] * 1e3, steps["predicted"][m] * 1e3, s=10,
                           marker=marker, alpha=0.5, label=f"{mode.lower()} (run {i + 1})")
    _diagonal(ax, "step time, measured (ms)", "step time, predicted (ms)", log=True)
    ax.set_title("per-step time, teacher forced (sim.run.replay)")
    _save(fig, path)


def plot_latencies(run: RunFidelity, path: Path) -> None:
    """Free running: each request's TTFT, TPOT and E2E, simulated against real."""
    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(4.2 * len(LATENCIES), 4))
    real = run.real.requests.set_index("rid")
    sim = run.sim.requests.set_index("rid").reindex(real.index)
    for ax, name in zip(axes, LATENCIES, strict=True):
        ax.scatter(real[name] * 1e3, sim[name] * 1e3, s=12, alpha=0.7)
        _diagonal(ax, f"{name.upper()}, real (ms)", f"{name.upper()}, simulated (ms)", log=False)
    fig.suptitle("per-request latency, free running (first run)")
    _save(fig, path)


def _diagonal(ax, xlabel: str, ylabel: str, log: bool) -> None:
    lo, hi = (min(ax.get_xlim()[0], ax.get_ylim()[0]), max(ax.get_xlim()[1], ax.get_ylim()[1]))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
