"""`fleet_result`: the RunResult a fleet run returns (`sim.fleet.fleet_layout`), with
`shared.trace.run_result`'s metric definitions over the whole fleet, one part per replica.

- `requests`, `steps`: every replica's rows (REQUEST_COLUMNS, STEP_COLUMNS), their
  `replica` column numbering the replicas; requests in arrival order.
- `summary`: the `vllm bench serve` metrics over all requests (one client in front of the
  router sees them all: ITL gaps pooled over the replicas, duration from the first arrival
  to the last finish), `num_retractions` and `cache_hit_tokens`, plus `replicas`,
  `prefix_hit_rate` (cached prompt tokens / prompt tokens) and `load_imbalance` (the
  busiest replica's routed prompt + output tokens / the mean over replicas; 1.0 is even).
- `replicas`: one row per replica: requests routed, completed, prompt, output and cached
  tokens, prefix_hit_rate, output_throughput over the fleet's duration, ttft_p50/p90 and
  tpot_p50.
- `run.replica_of`: the router's decision per request (`run`: the `FleetRun`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.trace.run_result import (
    SLO,
    STEP_FIELDS_READ,
    RunPart,
    RunResult,
    completed_mask,
    requests_frame,
    steps_frame,
    summarize,
    trace_inter_token_latencies,
)

if TYPE_CHECKING:
    from shared.trace.trace import Trace
    from sim.fleet.driver import FleetRun


def fleet_result(run: FleetRun, slo: SLO | None = None,
                 bounds: Sequence[Sequence[str] | None] | None = None) -> RunResult:
    """The fleet's RunResult: one part per replica, `replicas` its per-replica table, `run`
    the FleetRun (its routing, `replica_of`). `bounds`: per replica, its steps' bound
    column (None: "")."""
    import pandas as pd

    bounds = bounds or [None] * len(run.traces)
    parts = [_replica_frames(t, b) for t, b in zip(run.traces, bounds, strict=True)]
    requests = pd.concat([p.requests.assign(replica=i) for i, p in enumerate(parts)],
                         ignore_index=True)
    done = np.concatenate([p.done for p in parts])
    order = np.argsort(requests["arrival"].to_numpy(), kind="stable")
    requests, done = requests.iloc[order].reset_index(drop=True), done[order]
    steps = pd.concat([p.steps.assign(replica=i) for i, p in enumerate(parts)],
                      ignore_index=True)
    summary = summarize(requests, done, np.concatenate([p.itl for p in parts]), slo)
    replicas = _replicas_frame(requests, done, summary["duration"], len(parts))
    summary.update(_fleet_stats(run.traces, requests, replicas))
    return RunResult(None, requests, steps, summary, slo, done=done, replicas=replicas, run=run,
                     parts=tuple(RunPart("replica", i, t) for i, t in enumerate(run.traces)))


class _Frames:
    def __init__(self, requests: Any, done: np.ndarray, itl: np.ndarray, steps: Any) -> None:
        self.requests, self.done, self.itl, self.steps = requests, done, itl, steps


def _replica_frames(trace: Trace, bounds: Sequence[str] | None) -> _Frames:
    requests, done = requests_frame(trace), completed_mask(trace)
    columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
    itl = trace_inter_token_latencies(trace, columns, set(requests["rid"][done]))
    return _Frames(requests, done, itl, steps_frame(columns, bounds))


def _replicas_frame(requests: Any, done: np.ndarray, duration: float, n: int) -> Any:
    import pandas as pd

    rows = []
    for i in range(n):
        mine = (requests["replica"] == i).to_numpy()
        r, ok = requests[mine], requests[mine & done]
        prompt = int(r["prompt_len"].sum())
        rows.append({
            "replica": i, "requests": len(r), "completed": len(ok), "prompt_tokens": prompt,
            "output_tokens": int(r["output_len"].sum()),
            "cached_tokens": int(r["cached_tokens"].sum()),
            "prefix_hit_rate": r["cached_tokens"].sum() / prompt if prompt else np.nan,
            "output_throughput": ok["output_len"].sum() / duration if duration > 0 else np.nan,
            "ttft_p50": _pct(ok["ttft"], 50), "ttft_p90": _pct(ok["ttft"], 90),
            "tpot_p50": _pct(ok["tpot"], 50)})
    return pd.DataFrame(rows)


def _pct(values: Any, p: float) -> float:
    v = values.to_numpy(dtype=float)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, p)) if v.size else np.nan


def _fleet_stats(traces: Sequence[Trace], requests: Any, replicas: Any) -> dict[str, float]:
    work = (replicas["prompt_tokens"] + replicas["output_tokens"]).to_numpy(dtype=float)
    prompt = float(requests["prompt_len"].sum())
    return {"num_retractions": sum(r.num_retractions for t in traces for r in t.requests.values()),
            "cache_hit_tokens": int(requests["cached_tokens"].sum()),
            "replicas": len(traces),
            "prefix_hit_rate": float(requests["cached_tokens"].sum()) / prompt if prompt else np.nan,
            "load_imbalance": float(work.max() / work.mean()) if work.mean() > 0 else np.nan}
