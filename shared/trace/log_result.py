"""`result_from_log`: the `RunResult` of a lean run, read from its `RunLog` as
`RunResult.from_trace` reads a Trace, with the same requests, steps (when kept) and summary:
per-request numbers come from the log's request table, ITL from its `TokenGaps` (exact, or
sketched past its limit: `shared.trace.token_gaps`). `requests_of`, `pooled_gaps` and
`steps_of` are its pieces, for a run of several engines (a fleet) to pool."""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.trace.run_log import RunLog
from shared.trace.run_result import SLO, STEP_COLUMNS, RunResult, frame_of_requests, summarize
from shared.trace.token_gaps import GapSketch


def result_from_log(log: RunLog, slo: SLO | None = None) -> RunResult:
    """The run's RunResult (`trace` None, `log` the log); folds what the log still holds."""
    log.finish()
    requests, done = requests_of(log), log.completed()
    itl = log.gaps.stats(done, _rank(log))
    summary = summarize(requests, done, None, slo, itl_stats=itl)
    summary["num_retractions"] = int(log.table.column("num_retractions").sum())
    summary["cache_hit_tokens"] = int(requests["cached_tokens"].sum())
    return RunResult(None, requests, steps_of(log), summary, slo, done=done, log=log)


def requests_of(log: RunLog) -> Any:
    """The `.requests` frame (REQUEST_COLUMNS, `replica` 0) of a finished log."""
    t = log.table
    return frame_of_requests(
        t.column("rid"), t.column("arrival_time").copy(), t.column("first_token_time").copy(),
        t.column("finish_time").copy(), t.column("prompt_len").copy(),
        t.column("output_len").copy(), t.column("cached_tokens").copy(),
        log.gaps.largest(len(t)))


def pooled_gaps(log: RunLog, done: np.ndarray) -> np.ndarray | GapSketch:
    """The `done` requests' ITL gaps of a finished log (`TokenGaps.pooled`): in exact mode
    the array `RunResult.from_trace` pools (by rid, then time), else its sketch."""
    return log.gaps.pooled(done, _rank(log))


def _rank(log: RunLog) -> np.ndarray | None:
    """Each request's place in rid order, when the gaps are exact (a sketch reads none)."""
    return rid_rank(log.table.column("rid")) if log.gaps.sketch is None else None


def rid_rank(rids: np.ndarray) -> np.ndarray:
    """[R] each rid's place in sorted rid order (the order pooled gaps are laid out in)."""
    rank = np.empty(len(rids), np.int64)
    rank[sorted(range(len(rids)), key=rids.__getitem__)] = np.arange(len(rids))
    return rank


def steps_of(log: RunLog) -> Any:
    """The `.steps` frame: the log's step table, or no rows when it kept none."""
    import pandas as pd

    columns = log.steps_table.columns() if log.steps_table is not None else {}
    if not columns:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    columns["replica"] = np.zeros(len(columns["step"]), np.int64)
    for name in ("forward_mode", "bound"):
        columns[name] = pd.Series(columns[name], dtype=object)
    return pd.DataFrame(columns, columns=list(STEP_COLUMNS))
