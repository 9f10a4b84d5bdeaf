"""`disagg_result`: the RunResult a disaggregated run returns (`sim.fleet.disagg_layout`), with
`shared.trace.run_result`'s metric definitions as the client sees them.

- `requests`: one row per request, REQUEST_COLUMNS (but `replica`) plus `prefill_instance`,
  `decode_instance` (-1: it ended at its first token) and `transfer` (seconds its KV spent
  crossing, queueing for the link included); `first_token_time` is when the transfer ended
  (the prefill's first token for a request that ended there), `output_len` counts that
  token, `cached_tokens` are the prefill instance's prefix-cache hits. A decode instance
  holds the first token as an output the request arrived with at the transfer's end
  (`sim.fleet.disaggregation.Handover`), so its record has the client's view already.
- `steps`: every instance's steps (STEP_COLUMNS, `replica` replaced by `role`: "prefill"
  or "decode", and `instance`).
- `summary`: the `vllm bench serve` metrics over all requests (ITL: the decode instances'
  token gaps, each request's first from the transfer's end to its second token), with
  `transfer_mean` and `transfer_p90`, retractions on any instance and the prefill side's
  cache-hit tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from shared.trace.run_result import (
    COMPLETED_FINISH_TYPES,
    REQUEST_COLUMNS,
    SLO,
    STEP_FIELDS_READ,
    RunPart,
    RunResult,
    latency_stats,
    steps_frame,
    summarize,
)
from shared.trace.trace_itl import trace_inter_token_latencies, trace_largest_gaps

if TYPE_CHECKING:
    from shared.trace.trace import RequestRecord, Trace
    from sim.fleet.disaggregation import DisaggRun


def disagg_result(run: DisaggRun, slo: SLO | None = None) -> RunResult:
    """The disaggregated run's RunResult: one part per prefill instance, then one per decode
    instance, `run` the DisaggRun (its transfers and routing)."""
    requests, done = _requests(run)
    decoded = set(requests["rid"][done]) & set(run.decode_of)
    itl = [_gaps(t, decoded) for t in run.decode_traces]
    summary = summarize(requests, done, np.concatenate([np.zeros(0), *itl]), slo)
    transfers = np.array([end - start for start, end in run.transfers.values()], dtype=float)
    stats = latency_stats("transfer", transfers)
    summary.update(transfer_mean=stats["transfer_mean"], transfer_p90=stats["transfer_p90"],
                   num_retractions=sum(r.num_retractions
                                       for t in (*run.prefill_traces, *run.decode_traces)
                                       for r in t.requests.values()),
                   cache_hit_tokens=int(requests["cached_tokens"].sum()))
    parts = (*(RunPart("prefill", i, t) for i, t in enumerate(run.prefill_traces)),
             *(RunPart("decode", i, t) for i, t in enumerate(run.decode_traces)))
    return RunResult(None, requests, _steps(run), summary, slo, parts=parts, done=done, run=run)


def _requests(run: DisaggRun) -> tuple[Any, np.ndarray]:
    import pandas as pd

    rows, done = [], []
    prefill = {rid: rec for t in run.prefill_traces for rid, rec in t.requests.items()}
    decode = {rid: rec for t in run.decode_traces for rid, rec in t.requests.items()}
    for rid, p in prefill.items():
        d = decode.get(rid)
        rows.append(_client_row(p, d, run.transfers.get(rid), run.prefill_of[rid],
                                run.decode_of.get(rid, -1)))
        last = d if d is not None else p
        done.append(last.finish_reason is not None
                    and last.finish_reason.type in COMPLETED_FINISH_TYPES)
    frame = pd.DataFrame(rows)
    frame["ttft"] = frame["first_token_time"] - frame["arrival"]
    frame["e2e"] = frame["finish_time"] - frame["arrival"]
    n = frame["output_len"].to_numpy()
    frame["tpot"] = np.where(n > 1, (frame["e2e"] - frame["ttft"]) / np.maximum(n - 1, 1), np.nan)
    largest = _largest_gaps(run.decode_traces)
    frame["max_itl"] = [largest.get(rid, np.nan) for rid in frame["rid"]]
    columns = [*(c for c in REQUEST_COLUMNS if c != "replica"), "prefill_instance",
               "decode_instance", "transfer"]
    return frame[columns], np.array(done, dtype=bool)


def _client_row(p: RequestRecord, d: RequestRecord | None, transfer, pi: int, di: int) -> dict:
    row = {"rid": p.rid, "arrival": p.arrival_time, "prompt_len": len(p.input_ids),
           "cached_tokens": p.cached_tokens, "prefill_instance": pi, "decode_instance": di}
    if d is None:
        return {**row, "first_token_time": p.first_token_time, "finish_time": p.finish_time,
                "output_len": p.output_len, "transfer": np.nan}
    # NOTE: d arrived at the transfer's end holding the first token (its first_token_time)
    return {**row, "first_token_time": d.first_token_time, "finish_time": d.finish_time,
            "output_len": d.output_len, "transfer": transfer[1] - transfer[0]}


def _largest_gaps(traces) -> dict[str, float]:
    """rid -> its largest gap between tokens on its decode instance (from the transfer's
    end, where it arrived holding its first token)."""
    largest = {}
    for t in traces:
        columns = dict(zip(STEP_FIELDS_READ, t.step_columns(*STEP_FIELDS_READ), strict=True))
        largest.update(zip(t.requests, trace_largest_gaps(t, columns).tolist(), strict=True))
    return largest


def _gaps(trace: Trace, rids: set[str]) -> np.ndarray:
    """The decode instance's ITL gaps of `rids`, each from the transfer's end."""
    columns = dict(zip(STEP_FIELDS_READ, trace.step_columns(*STEP_FIELDS_READ), strict=True))
    return trace_inter_token_latencies(trace, columns, rids)


def _steps(run: DisaggRun) -> Any:
    import pandas as pd

    frames = []
    for role, traces in (("prefill", run.prefill_traces), ("decode", run.decode_traces)):
        for i, t in enumerate(traces):
            columns = dict(zip(STEP_FIELDS_READ, t.step_columns(*STEP_FIELDS_READ), strict=True))
            frames.append(steps_frame(columns).drop(columns="replica")
                          .assign(role=role, instance=i))
    return pd.concat(frames, ignore_index=True)
