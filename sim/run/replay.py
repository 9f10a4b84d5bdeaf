"""`replay(trace)`: re-run a recorded trace teacher-forced, to split timing-model error from
scheduling divergence (reference/simulators.md §7.2).

The recorded requests are re-submitted to a fresh `Scheduler` built from the header's
effective EngineConfig and ModelInfo, with the recorded step start times as the clock: before
step k is scheduled, every request that arrived by `Scheduler.admission_time(start_time[k])`
has been added (in arrival order; the rest by `start_time[k]` when that scheduling finds
nothing, as the driver does), and step k's results are processed at `start_time[k] +
duration[k]`. Tokens
come from a `ReplayTokenSource` of the trace. Each re-scheduled step is compared with the
recorded one (`StepRecord.diff`, times and the step counter ignored), and each recorded step
is priced with the cost model, so:

- `agree_fraction` / `first_divergence` measure the schedule (1.0 / None: the spec
  reproduces the recorded batches exactly);
- `mape` / `median_ape` measure the cost model on the recorded batches alone.

Like the SimPy driver and exec's online loop, the replay polls the scheduler once whenever
every request so far has finished (the idle call that resets `new_token_ratio`). A request the recording
aborted before its first token is aborted before the first step that starts after its
recorded finish time (exact for an abort while waiting; approximate mid-prefill).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shared.batch.forward_batch import ForwardBatch
from shared.loop.scheduler import Scheduler
from shared.request.req import Req
from shared.trace.trace import RequestRecord, Trace
from sim.cost.base import CostModel, ZeroCostModel, reprice
from sim.cost.engine_profile import EngineProfile
from sim.cost.registry import COST_MODELS, CostInputs, build_cost_model
from sim.hardware.hardware import Hardware
from sim.hardware.lookup import get_hardware
from sim.model.ep_options import EPOptions
from sim.model.from_config import get_model_shape
from sim.run.build import graph_batch_limit
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import ReplayTokenSource

if TYPE_CHECKING:
    import pandas as pd

    from shared.batch.schedule_batch import ScheduleBatch
    from shared.trace.step_record import StepRecord

REPLAY_IGNORED_FIELDS = ("start_time", "duration", "step")
MISSING_STEP = "missing step"


class ReplayResult(NamedTuple):
    """`agree_fraction`: fraction of recorded steps the replay re-scheduled identically;
    `first_divergence`: index of the first step that differs (None: all agree); `steps`: one
    row per recorded step, columns `step, measured, predicted` (seconds) plus `agree` and
    `diff_field` (the first differing StepRecord field, '' when the step agrees); `mape` and
    `median_ape`: mean and median of |predicted - measured| / measured over steps with a
    measured time > 0 (fractions, NaN when there are none)."""

    agree_fraction: float
    first_divergence: int | None
    steps: pd.DataFrame
    mape: float
    median_ape: float


def replay(trace: Trace | str | os.PathLike[str], cost_model: CostModel | None = None
           ) -> ReplayResult:
    """Replay `trace` (a Trace or a trace file path) teacher-forced; see the module doc.
    `cost_model=None` prices with the cost model the header names (`default_cost_model`) on
    its model (config.json), hardware and parallelism; a trace from a device with no catalogue entry (an exec trace) needs a
    cost model. Raises ValueError for an empty trace or a missing cost model."""
    import pandas as pd

    trace = trace if isinstance(trace, Trace) else Trace.load(trace)
    recorded = trace.steps
    if not recorded:
        raise ValueError("the trace has no steps to replay")
    model = cost_model if cost_model is not None else default_cost_model(trace)
    diffs = replay_schedule(trace)
    measured = np.array([s.duration for s in recorded], dtype=np.float64)
    predicted = reprice(model, recorded, trace.engine_config.overlap)
    agree = np.array([d is None for d in diffs])
    steps = pd.DataFrame({"step": np.arange(len(recorded)), "measured": measured,
                          "predicted": predicted, "agree": agree,
                          "diff_field": [d or "" for d in diffs]})
    mape, median = _ape(measured, predicted)
    first = int(np.argmin(agree)) if not agree.all() else None
    return ReplayResult(float(agree.mean()), first, steps, mape, median)


def default_cost_model(trace: Trace, name: str | None = None) -> CostModel:
    """The cost model the header names (its executor's `cost_model`, e.g. "kernel(...)"), or
    the COST_MODELS `name` given, rebuilt on the header's model, hardware, parallelism, EP
    options and engine profile (a sim trace's executor `{"kind": "sim", "hardware", "tp",
    ...}`); a header naming none: the default on its hardware."""
    ex = trace.executor or {}
    key = ex.get("hardware")
    advice = ("pass a cost model: replay(trace, cost_model=...), e.g. "
              "CalibratedCostModel.fit(trace.steps), or `batchtwin replay --hardware KEY` / "
              "`--cost-model NAME|JSON` / `--fit`")
    if key is None:
        raise ValueError(f"the trace's executor {ex!r} names no hardware in the catalogue; "
                         f"{advice}")
    try:
        hardware = get_hardware(key)
    except ValueError as e:
        raise ValueError(f"the trace's hardware {key!r} is not in the catalogue ({e}); "
                         f"{advice}") from None
    if not trace.model_config:
        raise ValueError(f"the trace header holds no model config.json; {advice}")
    recorded = str(ex.get("cost_model", "")).split("(")[0]
    return build_cost_model(name or (recorded if recorded in COST_MODELS else None),
                            header_cost_inputs(trace, hardware))


def header_cost_inputs(trace: Trace, hardware: Hardware) -> CostInputs:
    """The CostInputs `build_simulation` gave the run that recorded `trace` (its header)."""
    ex = trace.executor or {}
    options = EPOptions(**ex["ep_options"]) if "ep_options" in ex else EPOptions()
    shape = get_model_shape(trace.model_config).with_dtypes(
        ex.get("weight_dtype", "bf16"), ex.get("kv_dtype", "bf16"))
    profile = EngineProfile(**ex["engine_profile"]) if "engine_profile" in ex else None
    return CostInputs(options.physical_shape(shape), hardware, int(ex.get("tp", 1)),
                      int(ex.get("ep_size", 1)), float(ex.get("expert_zipf", 0.0)),
                      graph_batch_limit(trace.engine_config), None,
                      int(ex.get("attention_dp", 1)), options, profile)


def replay_schedule(trace: Trace) -> list[str | None]:
    """Per recorded step: None if the teacher-forced replay scheduled it identically, else
    the first differing field (or 'missing step' when the replay had nothing to run)."""
    scheduler = Scheduler(trace.engine_config, trace.model_info)
    source = ReplayTokenSource(trace)
    runner = SimModelRunner(ZeroCostModel(), source, scheduler.config, trace.model_info)
    arrivals = _Arrivals(scheduler, trace.requests.values())
    ran: list[bool] = []
    end = 0.0
    for rec in trace.steps:
        batch = _schedule(scheduler, arrivals, rec.start_time)
        ran.append(batch is not None)
        if batch is None:
            continue
        fb = ForwardBatch.init_new(batch)
        output = runner.forward(fb)
        ids = runner.sample(output, fb)
        end = rec.start_time + rec.duration
        scheduler.process_batch_result(batch, output, ids, end, source.finished(batch, ids))
        arrivals.admit(end, scheduler.admission_time(end))
        if not scheduler.reqs:  # every request so far finished: the driver's idle poll
            scheduler.get_next_batch_to_run(end)
    if scheduler.pending is not None:  # NOTE: overlap: the last result is processed at the next poll
        scheduler.get_next_batch_to_run(end)
    replayed = iter(scheduler.trace.steps)
    return [_first_diff(rec, next(replayed)) if r else MISSING_STEP
            for rec, r in zip(trace.steps, ran, strict=True)]


def _schedule(scheduler: Scheduler, arrivals: _Arrivals, now: float) -> ScheduleBatch | None:
    """The driver's scheduling at `now`: admit by `Scheduler.admission_time`, schedule, and
    when that finds nothing, admit the rest that arrived by `now` and schedule again."""
    arrivals.admit(now, scheduler.admission_time(now))
    batch = scheduler.get_next_batch_to_run(now)
    if batch is None:
        arrivals.admit(now)
        batch = scheduler.get_next_batch_to_run(now)
    return batch


class _Arrivals:
    """Adds recorded requests as the replay clock passes their arrival times, and aborts
    those the recording aborted before their first token."""

    def __init__(self, scheduler: Scheduler, requests) -> None:
        self.scheduler = scheduler
        self.pending: list[RequestRecord] = sorted(requests, key=lambda r: r.arrival_time)
        self.next = 0
        self.aborts = sorted((r for r in self.pending if _aborted_unserved(r)),
                             key=lambda r: r.finish_time)

    def admit(self, now: float, until: float | None = None) -> None:
        """Apply the aborts recorded before `now`, then add the requests that arrived by
        `until` (default `now`)."""
        while self.aborts and self.aborts[0].finish_time < now:
            rec = self.aborts.pop(0)
            self._admit_until(rec.arrival_time)
            self.scheduler.abort(rec.rid, rec.finish_reason.message or "aborted")
        self._admit_until(now if until is None else until)

    def _admit_until(self, now: float) -> None:
        reqs = self.pending
        while self.next < len(reqs) and reqs[self.next].arrival_time <= now:
            r = reqs[self.next]
            self.scheduler.add_request(Req(r.rid, list(r.input_ids), r.sampling_params,
                                           arrival_time=r.arrival_time,
                                           output_ids=list(r.prebuilt_output_ids)))
            self.next += 1


def _aborted_unserved(r: RequestRecord) -> bool:
    return r.finish_reason is not None and r.finish_reason.type == "abort" and r.output_len == 0


def _first_diff(recorded: StepRecord, replayed: StepRecord) -> str | None:
    d = recorded.diff(replayed, REPLAY_IGNORED_FIELDS)
    return None if d is None else d.field


def _ape(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float]:
    ok = measured > 0
    if not ok.any():
        return float("nan"), float("nan")
    ape = np.abs(predicted[ok] - measured[ok]) / measured[ok]
    return float(ape.mean()), float(np.median(ape))
