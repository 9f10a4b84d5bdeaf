"""`fleet_result`: the RunResult (a `FleetResult`) a fleet run returns (`sim.fleet.fleet_layout`), with
`shared.trace.run_result`'s metric definitions over the whole fleet, one part per replica.

- `requests`, `steps`: every replica's rows (REQUEST_COLUMNS, STEP_COLUMNS), their
  `replica` column numbering the replicas; requests in arrival order.
- `summary`: the `vllm bench serve` metrics over all requests (one client in front of the
  router sees them all: ITL gaps pooled over the replicas, exact when every replica's are,
  else sketched (`shared.trace.token_gaps`); duration from the first arrival to the last
  finish), `num_retractions` and `cache_hit_tokens`, plus `replicas`,
  `prefix_hit_rate` (cached prompt tokens / prompt tokens) and `load_imbalance` (the
  busiest replica's routed prompt + output tokens / the mean over replicas; 1.0 is even).
- `replicas`: one row per replica: requests routed, completed, prompt, output and cached
  tokens, prefix_hit_rate, output_throughput over the fleet's duration, ttft_p50/p90 and
  tpot_p50.
- `run.replica_of`: the router's decision per request (`run`: the `FleetRun`).

A lean fleet's replicas keep RunLogs (`shared.trace.run_log`), read as a lean run's result
reads its log (`shared.trace.log_result`): the same frames and summary as from their traces;
`part_result` of such a replica is its lean result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from shared.trace.log_result import pooled_gaps, requests_of, result_from_log, steps_of
from shared.trace.run_log import RunLog
from shared.trace.run_result import (
    SLO,
    STEP_FIELDS_READ,
    RunPart,
    RunResult,
    completed_mask,
    requests_frame,
    steps_frame,
    summarize,
)
from shared.trace.token_gaps import GapSketch, pool_gaps
from shared.trace.trace_itl import trace_inter_token_latencies

if TYPE_CHECKING:
    from shared.trace.trace import Trace
    from sim.fleet.driver import FleetRun


def fleet_result(run: FleetRun, slo: SLO | None = None,
                 bounds: Sequence[Sequence[str] | None] | None = None) -> RunResult:
    """The fleet's RunResult: one part per replica (its Trace, or a lean fleet's RunLog),
    `replicas` its per-replica table, `run` the FleetRun (its routing, `replica_of`).
    `bounds`: per replica Trace, its steps' bound column (None: ""; a RunLog priced its own)."""
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
    itl = pool_gaps([p.itl for p in parts])
    summary = summarize(requests, done, itl, slo) if not isinstance(itl, GapSketch) else \
        summarize(requests, done, None, slo, itl_stats=itl.stats())
    replicas = _replicas_frame(requests, done, summary["duration"], len(parts))
    summary.update(_fleet_stats([p.retractions for p in parts], requests, replicas))
    return FleetResult(None, requests, steps, summary, slo, done=done, replicas=replicas, run=run,
                       parts=tuple(RunPart("replica", i, t) for i, t in enumerate(run.traces)))


@dataclass(frozen=True, eq=False)
class FleetResult(RunResult):
    """A fleet's RunResult, whose lean replicas' parts are RunLogs: `part_result` reads one as
    a lean run's result (`result_from_log`), a Trace as every run's."""

    def part_result(self, role: str, index: int = 0) -> RunResult:
        for part in self.parts:
            if (part.role, part.index) == (role, index) and isinstance(part.trace, RunLog):
                return result_from_log(part.trace, self.slo)
        return super().part_result(role, index)


class _Frames(NamedTuple):
    """One replica's rows, its completed mask, pooled ITL gaps and retractions."""

    requests: Any
    done: np.ndarray
    itl: np.ndarray | GapSketch
    steps: Any
    retractions: int


def _replica_frames(trace: Trace | RunLog, bounds: Sequence[str] | None) -> _Frames:
    if isinstance(trace, RunLog):
        return _log_frames(trace)
    requests, done = requests_frame(trace), completed_mask(trace)
    columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
    itl = trace_inter_token_latencies(trace, columns, set(requests["rid"][done]))
    retractions = sum(r.num_retractions for r in trace.requests.values())
    return _Frames(requests, done, itl, steps_frame(columns, bounds), retractions)


def _log_frames(log: RunLog) -> _Frames:
    """A lean replica's frames, as `_replica_frames` reads them from its trace
    (`shared.trace.log_result`: the same rows and, in exact mode, the same gaps)."""
    log.finish()
    requests, done = requests_of(log), log.completed()
    retractions = int(log.table.column("num_retractions").sum())
    return _Frames(requests, done, pooled_gaps(log, done), steps_of(log), retractions)


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


def _fleet_stats(retractions: Sequence[int], requests: Any, replicas: Any) -> dict[str, float]:
    """`retractions`: per replica, its requests' retractions."""
    work = (replicas["prompt_tokens"] + replicas["output_tokens"]).to_numpy(dtype=float)
    prompt = float(requests["prompt_len"].sum())
    return {"num_retractions": sum(retractions),
            "cache_hit_tokens": int(requests["cached_tokens"].sum()),
            "replicas": len(retractions),
            "prefix_hit_rate": float(requests["cached_tokens"].sum()) / prompt if prompt else np.nan,
            "load_imbalance": float(work.max() / work.mean()) if work.mean() > 0 else np.nan}
