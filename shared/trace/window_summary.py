"""`window_summary`: a run's summary over the requests that arrived in a measurement window,
the warm-up before it left out (a run starts with an empty engine: its first requests see a
lighter load than the steady state that follows).

The numbers are `summarize`'s (`shared.trace.run_result` module doc) over the completed
requests that arrived in [start, end]: latency statistics, and throughputs over the span
from the first of them arriving to the last finishing. ITL pools the gaps of those requests
alone, read from the run's kept traces (a lean run keeps no per-request gaps: its ITL stats
are NaN).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shared.trace.run_result import STEP_FIELDS_READ, RunResult, summarize
from shared.trace.trace import Trace
from shared.trace.trace_itl import trace_inter_token_latencies


def window_summary(result: RunResult, start: float, end: float = math.inf,
                   itl: bool = True) -> dict[str, Any]:
    """The summary of `result`'s completed requests that arrived in [start, end]; without
    `itl` its ITL stats are NaN (the gaps' pass skipped)."""
    requests = result.requests
    arrival = requests["arrival"].to_numpy(dtype=float)
    inside = (arrival >= start) & (arrival <= end)                 # [R]
    done = completed_rows(result) & inside                          # [R]
    itl = window_gaps(result.traces, set(requests["rid"][done])) if itl and result.traces else None
    summary = summarize(requests[inside], done[inside], itl, result.slo,
                        None if itl is not None else _no_itl())
    summary["window_requests"] = int(inside.sum())
    return summary


def completed_rows(result: RunResult) -> np.ndarray:
    """[R] bool: the rows of `result.requests` its summary counts."""
    return result.requests.index.isin(result.completed_requests.index)


def window_gaps(traces: tuple[Trace, ...], rids: set[str]) -> np.ndarray:
    """The pooled inter-token gaps of the requests `rids` over every engine's trace."""
    parts = []
    for trace in traces:
        mine = rids & trace.requests.keys()
        columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
        parts.append(trace_inter_token_latencies(trace, columns, mine))
    return np.concatenate(parts) if parts else np.zeros(0)


def _no_itl() -> dict[str, float]:
    return {f"itl_{k}": math.nan for k in ("mean", "p50", "p90", "p99")}
