"""`pareto.png` of a `batchtwin plan`: the fleet trade-offs of every configuration's passing
rates (all seeds met the SLOs there).

Left: output tokens/s per GPU against TPOT p90 (worst seed); the Pareto front (no other
point has both more tokens per GPU and a lower TPOT) is joined and its points numbered, the
table beside the plot naming each number's configuration, rate and binding limit (labels on
the plot overlapped). Right: cost per million output tokens
against rate, one line per layout (hardware, tp, dp, ep, dtypes: its cheapest passing
configuration at each rate; GPU-hours per million tokens without --gpu-hour-price). Runs
above a configuration's saturation throughput are left out (a finite run there can pass
where a long one cannot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from experiments.plan.point import PointResult
from experiments.plan.search import Outcome

PARETO_PNG = "pareto.png"


class FleetPoint(NamedTuple):
    label: str
    limit: str
    rate: float
    tpot_p90: float          # seconds, worst seed
    tokens_per_gpu: float    # output tokens/s per GPU at that rate
    cost: float              # $ (or GPU-hours) per million output tokens


def fleet_points(runs: Sequence[PointResult], outcomes: Sequence[Outcome],
                 prices: dict[str, float]) -> list[FleetPoint]:
    """One point per (configuration, finite rate) whose every seed passed."""
    limits = {o.candidate: o.limit.kind for o in outcomes}
    ceiling = {o.candidate: o.saturation for o in outcomes}
    groups: dict[tuple, list[PointResult]] = {}
    for r in runs:  # NOTE: above saturation a finite run can pass where a long one cannot
        c = r.point.candidate
        if math.isfinite(r.point.rate) and r.error is None and r.point.rate <= ceiling.get(c, 0):
            groups.setdefault((c, r.point.rate), []).append(r)
    points = []
    for (c, rate), group in groups.items():
        if not all(g.passed for g in group):
            continue
        per_request = [g.metrics["output_throughput"] / g.metrics["request_throughput"]
                       for g in group if g.metrics["request_throughput"] > 0]
        if not per_request:
            continue
        tokens = rate * sum(per_request) / len(per_request)
        price = prices.get(c.hardware, 1.0)
        points.append(FleetPoint(c.label, limits.get(c, ""), rate,
                                 max(g.metrics["tpot_p90"] for g in group),
                                 tokens / c.num_gpus, c.num_gpus * price / (tokens * 3600 / 1e6)))
    return points


def pareto_front(points: Sequence[FleetPoint]) -> list[FleetPoint]:
    """The points no other beats on both tokens per GPU (higher) and TPOT p90 (lower)."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p.tpot_p90, -p.tokens_per_gpu)):
        if p.tokens_per_gpu > best:
            front.append(p)
            best = p.tokens_per_gpu
    return front


def write_pareto(out: Path, points: Sequence[FleetPoint], priced: bool, title: str) -> str:
    from experiments.plan.plots import _pyplot

    plt = _pyplot()
    fig, (left, key, right) = plt.subplots(1, 3, figsize=(17, 5.5),
                                           gridspec_kw={"width_ratios": (5, 3, 5)})
    left.scatter([p.tpot_p90 * 1e3 for p in points], [p.tokens_per_gpu for p in points],
                 s=14, color="0.6", label="passing runs")
    front = pareto_front(points)
    left.plot([p.tpot_p90 * 1e3 for p in front], [p.tokens_per_gpu for p in front], "o-",
              color="C3", label="Pareto front (numbered: see the table)")
    for i, p in enumerate(front, 1):   # NOTE: numbers on the plot, names in the table beside it
        left.annotate(str(i), (p.tpot_p90 * 1e3, p.tokens_per_gpu), fontsize=8, color="C3",
                      xytext=(3, 3), textcoords="offset points")
    left.set(xlabel="TPOT p90 (ms)", ylabel="output tokens/s per GPU")
    left.legend(fontsize=8)
    front_table(key, front)
    for layout in dict.fromkeys(_short(p.label) for p in points):
        mine = _cheapest_by_rate([p for p in points if _short(p.label) == layout])
        right.plot([p.rate for p in mine], [p.cost for p in mine], "o-", ms=3, label=layout)
    right.set(xlabel="request rate (req/s)", yscale="log",
              ylabel="$ per million output tokens" if priced else "GPU-hours per million output tokens",
              title="each layout's cheapest passing run per rate")
    right.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out / PARETO_PNG, dpi=110)
    plt.close(fig)
    return PARETO_PNG


def front_table(ax, front: Sequence[FleetPoint]) -> None:
    """The Pareto front's points by number: configuration, rate and binding limit."""
    ax.axis("off")
    lines = [f"{i:>2}  {_short(p.label)} @ {p.rate:.3g}/s, {p.tpot_p90 * 1e3:.0f} ms ({p.limit})"
             for i, p in enumerate(front, 1)]
    ax.text(0.0, 1.0, "Pareto front\n\n" + "\n".join(lines), va="top", ha="left",
            family="monospace", fontsize=7, transform=ax.transAxes)


def _cheapest_by_rate(points: Sequence[FleetPoint]) -> list[FleetPoint]:
    best: dict[float, FleetPoint] = {}
    for p in points:
        if p.rate not in best or p.cost < best[p.rate].cost:
            best[p.rate] = p
    return [best[r] for r in sorted(best)]


def _short(label: str) -> str:
    """The layout part of a configuration's label (hardware, tp, dp, ep, dtypes)."""
    return label.split(" chunk=")[0]
