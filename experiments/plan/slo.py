"""SLO targets for `batchtwin plan`: upper limits on the run summary's latency statistics.

    ttft_p90=2s,tpot_p90=100ms        # 90% of requests get their first token within 2 s ...

A target is `{metric}_{stat}=VALUE[unit]`: metric ttft, tpot, itl, e2e or max_itl (each
request's largest gap between tokens), stat mean, p50, p90 or p99 (the keys of
`RunResult.summary`), unit s (default), ms or us. A run meets the targets when every named
statistic is at most its limit: `max_itl_p90=50ms` is SLO attainment with a per-token limit,
90% of the requests keep every gap within 50 ms. For goodput, each request is held to the
same limits one by one (`per_request`): a request counts when its own TTFT, TPOT, E2E and
largest gap are within the tightest limit given for that metric (ITL's pooled gaps have no
per-request value).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from shared.trace.run_result import SLO

METRICS = ("ttft", "tpot", "itl", "e2e", "max_itl")
STATS = ("mean", "p50", "p90", "p99")
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
PER_REQUEST_METRICS = ("ttft", "tpot", "e2e", "max_itl")
DEFAULT_SLO = "ttft_p90=2s,tpot_p90=100ms"
_VALUE = re.compile(r"^([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|ms|us)?$")


@dataclass(frozen=True)
class Objective:
    """`metric_stat <= limit` (seconds)."""

    metric: str
    stat: str
    limit: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"

    def __str__(self) -> str:
        return f"{self.key} <= {format_seconds(self.limit)}"


class Violation(NamedTuple):
    objective: Objective
    value: float

    def __str__(self) -> str:
        return f"{self.objective.key} {format_seconds(self.value)} > {format_seconds(self.objective.limit)}"


@dataclass(frozen=True)
class SLOTargets:
    objectives: tuple[Objective, ...]

    def __post_init__(self) -> None:
        if not self.objectives:
            raise ValueError("--slo: give at least one target, e.g. ttft_p90=2s")
        keys = [o.key for o in self.objectives]
        if len(set(keys)) != len(keys):
            raise ValueError(f"--slo: a statistic is named twice in {', '.join(keys)}")

    @classmethod
    def parse(cls, text: str) -> SLOTargets:
        """From `ttft_p90=2s,tpot_p90=100ms`; ValueError with the offending part."""
        return cls(tuple(parse_objective(part.strip()) for part in text.split(",")
                         if part.strip()))

    def violations(self, summary: dict[str, Any]) -> tuple[Violation, ...]:
        """The objectives a summary misses (a NaN statistic misses)."""
        out = []
        for o in self.objectives:
            value = float(summary.get(o.key, math.nan))
            if not value <= o.limit:
                out.append(Violation(o, value))
        return tuple(out)

    def limits(self) -> dict[str, float]:
        """{"tpot_p90": 0.1, ...}: each objective's limit (seconds) by its summary key."""
        return {o.key: o.limit for o in self.objectives}

    def per_request(self) -> SLO:
        """Per-request thresholds for goodput: the tightest limit on each metric."""
        from shared.trace.run_result import SLO

        limits = {m: min((o.limit for o in self.objectives if o.metric == m), default=None)
                  for m in PER_REQUEST_METRICS}
        return SLO(**limits)

    def __str__(self) -> str:
        return ", ".join(str(o) for o in self.objectives)


def parse_objective(part: str) -> Objective:
    name, eq, value = part.partition("=")
    if not eq:
        raise ValueError(f"--slo: expected NAME=VALUE (e.g. ttft_p90=2s,tpot_p90=100ms), "
                         f"got {part!r}")
    metric, sep, stat = name.strip().lower().rpartition("_")   # NOTE: max_itl_p90
    if not sep:
        metric, stat = stat, ""
    if not stat:
        raise ValueError(f"--slo: {part!r} names no statistic; write METRIC_STAT=VALUE, "
                         f"e.g. {metric if metric in METRICS else 'ttft'}_p90=2s (statistics: {', '.join(STATS)})")
    if metric not in METRICS:
        raise ValueError(f"--slo: unknown metric {metric!r} in {part!r}; "
                         f"metrics: {', '.join(METRICS)}")
    if stat not in STATS:
        raise ValueError(f"--slo: unknown statistic {stat!r} in {part!r}; "
                         f"statistics: {', '.join(STATS)}")
    return Objective(metric, stat, parse_seconds(value.strip(), part))


def parse_seconds(value: str, part: str) -> float:
    m = _VALUE.match(value.lower())
    if not m:
        raise ValueError(f"--slo: bad value {value!r} in {part!r}; expected a number with "
                         f"unit s, ms or us (e.g. 2s, 100ms)")
    seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"--slo: {part!r} can never be met: a latency limit must be > 0")
    return seconds


def format_rate(x: float) -> str:
    """A request rate's number, 3 significant digits (whole numbers from 1000 on)."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


def format_seconds(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x >= 1:
        return f"{x:.3g} s"
    return f"{x * 1e3:.3g} ms" if x >= 1e-3 else f"{x * 1e6:.3g} us"
