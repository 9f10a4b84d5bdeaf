"""`RunResult`: what every run returns, built from its `Trace`, with `vllm bench serve`
metric definitions (all times in seconds).

Per request (`.requests`): TTFT = first_token_time - arrival (queueing included; the first
token's time is the end of the step that sampled it, however the prefill was chunked);
E2E = finish_time - arrival; TPOT = (E2E - TTFT) / (output_len - 1), NaN when
output_len <= 1; MAX_ITL = the request's largest gap between consecutive tokens (NaN with
fewer than two), what a per-token latency SLO holds every gap to. ITL is the list of gaps between consecutive output tokens of a request,
a token's time being the end (`start_time + duration`) of the step whose row for the
request has `next_token_ids != -1` (-1 is a discarded row in any step: an intermediate
prefill chunk, or under the overlap schedule the row a request that finished or was
retracted still held in the next step); gaps are pooled across requests, so a request of n
tokens sampled in the trace's steps has n - 1 gaps. A request that arrived with outputs
already produced (`RequestRecord.prebuilt_output_ids`: a disaggregated decode instance's
requests) has its first token at its arrival (`Scheduler.add_request`): the gap from there
to the first token sampled here counts too, so with one such output (the prefill's first
token) it also has output_len - 1 gaps.

Summary (`.summary`): latency stats (`{ttft,tpot,itl,e2e}_{mean,p50,p90,p99}`, linear
percentiles as `np.percentile`, NaN when there is no value) and throughputs cover
*completed* requests only: finished with a length or stop reason. Aborted requests and
requests that never finished are left out, as vllm leaves out failed ones (the rows stay
in `.requests`). `num_retractions` and `cache_hit_tokens` sum over every request.
`duration` = last finish time - first arrival over all requests (vllm uses the client's
wall time from the first send to the last response; this is the same span, measured at
the engine). Throughputs and goodput are NaN when duration is not positive. `goodput`
(only with an `SLO`) = completed requests meeting every given SLO / duration, a TPOT or
MAX_ITL of NaN (output_len <= 1) counting as 0, as vllm's `--goodput`; `slo_attainment`
the share of completed requests meeting it (DistServe's SLO attainment; with `max_itl`, a
request meets "ITL < L" only if every gap does). `max_itl_{mean,p50,p90,p99}` are over
the completed requests' MAX_ITL: max_itl_p90 <= L says 90% of them kept every gap within L.

Steps (`.steps`): one row per forward; `bound` names what bound the step ("compute",
"memory", "communication" or "cpu", as the simulator's cost model priced it:
`sim.cost.base.BoundSplit`), "" where the run does not know (exec runs, a trace read back).

Both frames carry `replica`: the engine replica that served the request or ran the step (0
for one engine; a fleet's rows, `sim.fleet.result`, number its replicas).

One engine's RunResult holds its `trace`. A run of several engines (a fleet, a disaggregated
layout: `sim.fleet`) is a RunResult too, with `trace` None and one `RunPart` per engine in
`parts` (its role, index and trace); `traces` lists every engine's trace either way, and
`part_result(role, i)` is that engine's own RunResult. `run` keeps the layout's own record (a fleet's
routing, a disaggregated run's transfers), `replicas` a fleet's per-replica table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from shared.trace.trace import RequestRecord, Trace
from shared.trace.trace_itl import trace_inter_token_latencies, trace_largest_gaps

if TYPE_CHECKING:
    from shared.trace.run_log import RunLog

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = (50, 90, 99)
REQUEST_COLUMNS = ("rid", "arrival", "first_token_time", "finish_time", "prompt_len",
                   "output_len", "cached_tokens", "ttft", "tpot", "e2e", "max_itl", "replica")
STEP_COLUMNS = ("step", "forward_mode", "batch_size", "num_tokens", "kv_used_tokens",
                "queue_len", "start_time", "duration", "bound", "replica")
COMPLETED_FINISH_TYPES = ("length", "stop")
PER_REQUEST = ("ttft", "tpot", "e2e", "max_itl")   # per-request latencies an SLO can hold


@dataclass(frozen=True)
class SLO:
    """Per-request latency objectives in seconds; None means no objective on that metric."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    max_itl: float | None = None   # every gap between a request's tokens (its `max_itl`)

    def __post_init__(self) -> None:
        for name in PER_REQUEST:
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"SLO {name} must be >= 0 seconds or None, got {value!r}")

    def met(self, requests: Any) -> np.ndarray:
        """[len(requests)] bool: which rows of a `.requests` frame meet every objective."""
        ok = np.ones(len(requests), dtype=bool)
        for name in PER_REQUEST:
            limit = getattr(self, name)
            if limit is not None:
                values = requests[name].to_numpy(dtype=float)
                if name in ("tpot", "max_itl"):   # NOTE: one token: no gap, met
                    values = np.where(requests["output_len"].to_numpy() <= 1, 0.0, values)
                ok &= values <= limit
        return ok


class RunPart(NamedTuple):
    """One engine of a run of several: its role ("replica", "prefill" or "decode"), its index
    among its role's engines and its trace (a lean fleet's replica: its RunLog)."""

    role: str
    index: int
    trace: Trace | RunLog


@dataclass(frozen=True, eq=False)
class RunResult:
    """A run's traces and its metrics. `requests` and `steps` are pandas DataFrames with
    REQUEST_COLUMNS / STEP_COLUMNS (a layout of several engines may add its own columns);
    `summary` holds plain floats and ints; `done` ([len(requests)] bool) the rows the
    summary counts, None: computed from `trace`."""

    trace: Trace | None
    requests: Any
    steps: Any
    summary: dict[str, float]
    slo: SLO | None = None
    parts: tuple[RunPart, ...] = ()
    done: np.ndarray | None = None
    replicas: Any = None
    run: Any = None
    log: Any = None

    @property
    def run_info(self) -> Any:
        """The engine the run describes (`engine_config`, `model_info`, `model_config`,
        `executor`): its trace, or a lean run's RunLog (a fleet's: its first part's trace)."""
        if self.trace is not None:
            return self.trace
        return self.log if self.log is not None else self.parts[0].trace

    @property
    def num_steps(self) -> int:
        """Steps run, by every engine of the run (also when `steps` kept none)."""
        return sum(len(t) for t in self.traces) if self.log is None else len(self.log)

    @classmethod
    def from_trace(cls, trace: Trace, slo: SLO | None = None,
                   bounds: Sequence[str] | None = None) -> RunResult:
        """`bounds`: one per step of the trace (the steps' `bound` column), None: all ""."""
        columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
        requests = requests_frame(trace, columns)
        done = completed_mask(trace)
        itl = trace_inter_token_latencies(trace, columns, set(requests["rid"][done]))
        summary = summarize(requests, done, itl, slo)
        summary["num_retractions"] = sum(r.num_retractions for r in trace.requests.values())
        summary["cache_hit_tokens"] = int(requests["cached_tokens"].sum())
        return cls(trace, requests, steps_frame(columns, bounds), summary, slo)

    @property
    def completed_requests(self) -> Any:
        """The rows of `requests` that count in the summary (not aborted, finished)."""
        return self.requests[completed_mask(self.trace) if self.done is None else self.done]

    @property
    def traces(self) -> tuple[Trace, ...]:
        """Every engine's trace: the parts' in order, or the one engine's."""
        if self.parts:
            return tuple(p.trace for p in self.parts)
        return (self.trace,) if self.trace is not None else ()

    def part_result(self, role: str, index: int = 0) -> RunResult:
        """Engine `index` of `role` ("replica", "prefill", "decode") as a RunResult of its
        own trace (a lean fleet's RunLog: `sim.fleet.result.FleetResult`); KeyError naming
        the roles the run has otherwise."""
        for part in self.parts:
            if (part.role, part.index) == (role, index):
                return RunResult.from_trace(part.trace, self.slo)
        raise KeyError(f"no {role} {index} in this run (parts: "
                       f"{sorted({p.role for p in self.parts}) or 'one engine'})")


STEP_FIELDS_READ = ("step", "forward_mode", "rids", "input_ids", "next_token_ids",
                    "kv_used_tokens", "queue_len", "start_time", "duration")


def is_completed(record: RequestRecord) -> bool:
    fr = record.finish_reason
    return fr is not None and fr.type in COMPLETED_FINISH_TYPES


def completed_mask(trace: Trace) -> np.ndarray:
    """[num_requests] bool, in `trace.requests` order."""
    return np.array([is_completed(r) for r in trace.requests.values()], dtype=bool)


def requests_frame(trace: Trace, columns: dict[str, list] | None = None) -> Any:
    """One row per request in `trace.requests`, columns REQUEST_COLUMNS (`columns`: the
    trace's STEP_FIELDS_READ, read here when not given)."""
    recs = list(trace.requests.values())
    if columns is None:
        columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
    return frame_of_requests(
        [r.rid for r in recs], np.array([r.arrival_time for r in recs], dtype=float),
        np.array([r.first_token_time for r in recs], dtype=float),
        np.array([r.finish_time for r in recs], dtype=float),
        np.array([len(r.input_ids) for r in recs], dtype=np.int64),
        np.array([r.output_len for r in recs], dtype=np.int64),
        np.array([r.cached_tokens for r in recs], dtype=np.int64),
        trace_largest_gaps(trace, columns))


def frame_of_requests(rid, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray,
                      prompt_len: np.ndarray, output_len: np.ndarray, cached: np.ndarray,
                      max_itl: np.ndarray) -> Any:
    """The `.requests` frame (REQUEST_COLUMNS) of these per-request columns ([R] each);
    `max_itl` each request's largest gap between tokens."""
    import pandas as pd

    ttft, e2e = first - arrival, finish - arrival
    tpot = np.full(len(arrival), np.nan)
    np.divide(e2e - ttft, output_len - 1, out=tpot, where=output_len > 1)
    return pd.DataFrame({
        "rid": pd.Series(rid, dtype=object), "arrival": arrival, "first_token_time": first,
        "finish_time": finish, "prompt_len": prompt_len, "output_len": output_len,
        "cached_tokens": cached, "ttft": ttft, "tpot": tpot, "e2e": e2e, "max_itl": max_itl,
        "replica": np.zeros(len(arrival), dtype=np.int64),
    }, columns=list(REQUEST_COLUMNS))


def steps_frame(columns: dict[str, list], bounds: Sequence[str] | None = None) -> Any:
    """One row per step, columns STEP_COLUMNS, from the trace's step columns
    (STEP_FIELDS_READ) and each step's bound (None: "" for every step)."""
    import pandas as pd

    step, mode, rids, ids, kv, queue, start, dur = (columns[name] for name in (
        "step", "forward_mode", "rids", "input_ids", "kv_used_tokens", "queue_len", "start_time",
        "duration"))
    n = len(step)
    if not n:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    if bounds is not None and len(bounds) != n:
        raise ValueError(f"{len(bounds)} step bounds for {n} steps")
    return pd.DataFrame({
        "step": np.array(step, dtype=np.int64), "forward_mode": pd.Series(mode, dtype=object),
        "batch_size": np.fromiter(map(len, rids), np.int64, n),
        "num_tokens": np.fromiter(map(len, ids), np.int64, n),
        "kv_used_tokens": np.array(kv, dtype=np.int64), "queue_len": np.array(queue, dtype=np.int64),
        "start_time": np.array(start, dtype=float), "duration": np.array(dur, dtype=float),
        "bound": pd.Series([""] * n if bounds is None else list(bounds), dtype=object),
        "replica": np.zeros(n, dtype=np.int64)})


def bound_shares(result: RunResult) -> dict[str, float]:
    """Fraction of the step time (sum of `duration`) each bound holds, largest first, from
    the result's `.steps` frame (a lean run's without steps: its RunLog's bound times); {}
    when no step has a bound (or no time)."""
    steps = result.steps
    if not len(steps) and result.log is not None:
        seconds = result.log.bound_seconds
        total = sum(seconds.values())
        return {k: v / total for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])} \
            if total > 0 else {}
    known = steps[steps["bound"] != ""] if len(steps) else steps
    total = float(known["duration"].sum()) if len(known) else 0.0
    if total <= 0:
        return {}
    shares = known.groupby("bound")["duration"].sum() / total
    return {str(k): float(v) for k, v in shares.sort_values(ascending=False).items()}


def summarize(requests: Any, done: np.ndarray, itl: np.ndarray | None,
              slo: SLO | None, itl_stats: dict[str, float] | None = None) -> dict[str, Any]:
    """The summary of the `done` rows of a `.requests` frame (module doc for definitions);
    the ITL stats from the pooled gaps `itl`, or given as `itl_stats` (a RunLog's)."""
    ok = requests[done]
    duration = run_duration(requests)
    summary: dict[str, Any] = {"duration": duration, "completed": int(done.sum())}
    summary["request_throughput"] = _per_second(len(ok), duration)
    summary["output_throughput"] = _per_second(int(ok["output_len"].sum()), duration)
    for name in LATENCY_METRICS:
        if name == "itl" and itl_stats is not None:
            summary.update(itl_stats)
            continue
        values = itl if name == "itl" else ok[name].to_numpy(dtype=float)
        summary.update(latency_stats(name, values))
    summary.update(latency_stats("max_itl", ok["max_itl"].to_numpy(dtype=float)))
    if slo is not None:
        met = int(slo.met(ok).sum())
        summary["goodput"] = _per_second(met, duration)
        summary["slo_attainment"] = met / len(ok) if len(ok) else math.nan
    return summary


def run_duration(requests: Any) -> float:
    """Last finish time - first arrival over all rows; NaN when nothing finished."""
    finish = requests["finish_time"].dropna()
    if finish.empty:
        return math.nan
    return float(finish.max() - requests["arrival"].min())


def latency_stats(name: str, values: np.ndarray) -> dict[str, float]:
    """`{name}_mean` and `{name}_p50/p90/p99` over the non-NaN values (NaN if none)."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {f"{name}_{k}": math.nan for k in ("mean", *(f"p{p}" for p in PERCENTILES))}
    stats = {f"{name}_mean": float(values.mean())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        stats[f"{name}_p{p}"] = float(v)
    return stats


def _per_second(count: float, duration: float) -> float:
    return count / duration if duration > 0 else math.nan
