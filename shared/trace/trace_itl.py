"""Inter-token latencies of a whole `Trace` (`vllm bench serve`'s ITL: `shared.trace.run_result`
module doc), from its step columns: every sampled row laid out flat, sorted by request, the
gaps within a request. A lean run pools the same gaps as it goes (`shared.trace.token_gaps`)."""

from __future__ import annotations

import itertools

import numpy as np

from shared.trace.trace import Trace


def trace_inter_token_latencies(trace: Trace, columns: dict[str, list],
                                rids: set[str]) -> np.ndarray:
    """`inter_token_latencies` of the requests in `rids` over `trace`'s steps (`columns`, its
    STEP_FIELDS_READ), each request that arrived with outputs (`prebuilt_output_ids`)
    starting from its arrival."""
    arrived_with = {rid: r.first_token_time for rid, r in trace.requests.items()
                    if r.prebuilt_output_ids and rid in rids}
    return inter_token_latencies(columns, rids, arrived_with)


def inter_token_latencies(columns: dict[str, list], rids: set[str],
                          arrived_with: dict[str, float] | None = None) -> np.ndarray:
    """Pooled gaps between consecutive sampled tokens of the requests in `rids` (seconds),
    from the trace's step columns (STEP_FIELDS_READ). `arrived_with`: rid -> the time of
    the last output token a request arrived with (produced before these steps), its first
    gap's start.

    Every (request, token time) row of every step is laid out flat, after one row per
    `arrived_with` entry; a stable sort by request keeps each request's tokens in time
    order, and the gaps are the differences within a request. Its first token has no gap."""
    arrived_with = arrived_with or {}
    if not rids or not (columns["step"] or arrived_with):
        return np.zeros(0)
    code_of = {rid: i for i, rid in enumerate(sorted(rids))}
    codes, times = _sorted_token_rows(columns, code_of, arrived_with)
    same = codes[1:] == codes[:-1]
    return np.diff(times)[same]


def trace_largest_gaps(trace: Trace, columns: dict[str, list]) -> np.ndarray:
    """[R] each request's largest gap between consecutive tokens (seconds; NaN with fewer
    than two), in `trace.requests` order: what a per-token latency limit is held to."""
    rids = list(trace.requests)
    largest = np.full(len(rids), np.nan)
    arrived_with = {rid: r.first_token_time for rid, r in trace.requests.items()
                    if r.prebuilt_output_ids}
    if not rids or not (columns["step"] or arrived_with):
        return largest
    codes, times = _sorted_token_rows(columns, {rid: i for i, rid in enumerate(rids)},
                                      arrived_with)
    same = codes[1:] == codes[:-1]
    np.fmax.at(largest, codes[1:][same].astype(np.int64), np.diff(times)[same])
    return largest


def _sorted_token_rows(columns: dict[str, list], code_of: dict[str, int],
                       arrived_with: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Every (request code, token time) row of the steps (after one row per `arrived_with`
    entry), the discarded and unasked ones dropped, stably sorted by request: each
    request's tokens in time order."""
    codes, times = _token_rows(*(columns[name] for name in (
        "rids", "next_token_ids", "start_time", "duration")), code_of)
    arrived_with = {rid: t for rid, t in arrived_with.items() if rid in code_of}
    if arrived_with:
        codes = np.concatenate((np.fromiter(map(code_of.__getitem__, arrived_with), codes.dtype,
                                            len(arrived_with)), codes))
        times = np.concatenate((np.fromiter(arrived_with.values(), float, len(arrived_with)),
                                times))
    keep = codes >= 0
    codes, times = codes[keep], times[keep]
    order = np.argsort(codes, kind="stable")   # NOTE: radix sort when the codes are int16
    return codes[order], times[order]


def _token_rows(rids: list[tuple], ids: list, start: list[float], dur: list[float],
                code_of: dict[str, int]):
    """Flat [N] request codes of every sampled row (-1: not asked for, or a discarded
    token) and their step end times, from per-step columns (int16 codes when they fit)."""
    dtype = np.int16 if len(code_of) < 2**15 else np.int64
    if not rids:
        return np.zeros(0, dtype), np.zeros(0)
    # NOTE: decode steps of an unchanged batch share one rids tuple: codes once per tuple.
    codes_of = {key: np.fromiter(map(code_of.get, r, itertools.repeat(-1)), dtype, len(r))
                for key, r in {id(r): r for r in rids}.items()}
    sizes = np.fromiter(map(len, ids), np.int64, len(ids))
    ends = np.array(start, dtype=float) + np.array(dur, dtype=float)
    codes = np.concatenate(list(map(codes_of.__getitem__, map(id, rids))))
    codes[_discarded_rows(ids, sizes)] = -1
    return codes, np.repeat(ends, sizes)


def _discarded_rows(ids: list, sizes: np.ndarray) -> np.ndarray:
    """Flat indices of the rows whose id is -1, in any step (an intermediate prefill chunk,
    or under overlap a request that finished or was retracted before the step's result was
    processed), from per-step ids (`sizes` [S] rows per step).

    NOTE: a step read back holds a tuple, which numpy converts one element at a time, and a
    step appended since an array: tuples are searched with `in` first and only those holding
    a -1 are converted; arrays are compared all at once."""
    look = [i for i, x in enumerate(ids) if type(x) is not tuple or -1 in x]
    if len(look) == len(ids):
        return np.flatnonzero(np.concatenate(ids, dtype=np.int64, casting="unsafe") == -1)
    if not look:
        return np.zeros(0, np.int64)
    steps = np.array(look, dtype=np.int64)
    counts = sizes[steps]                                            # [L] rows per step
    first = (sizes.cumsum() - sizes)[steps]                          # [L] its first flat row
    rows = np.arange(int(counts.sum())) + np.repeat(first - (counts.cumsum() - counts), counts)
    return rows[np.concatenate([ids[i] for i in look], dtype=np.int64, casting="unsafe") == -1]
