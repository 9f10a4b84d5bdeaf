"""How well the simulator predicts the real executor on this machine.

Protocol (`run_fidelity`): one Engine (fixed torch thread count); then `runs` times: get the
run's calibrated cost model (a fixed one, or a fresh calibration on the same engine: this
host's speed drifts by up to ~25% over minutes), warm up, `Engine.reset()`, serve the workload
online (`Engine.run`, Poisson arrivals in wall-clock time), and simulate the same workload with the calibrated model on a
scheduler built from the real trace's effective EngineConfig (its `max_total_tokens`
included; nothing re-derived), with the real run's tokens (`ReplayTokenSource`, so requests
end where the real ones did). Each run gives

- teacher forcing (`sim.run.replay` of the real trace): median APE and MAPE of per-step time,
  and the fraction of recorded steps the spec re-schedules identically;
- free running: relative error of TTFT, TPOT and E2E at p50 and p90, and the fraction of
  steps whose batch (mode and requests) matches the real step of the same index.

`medians` takes the median of every figure over the runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from shared.loop.scheduler import Scheduler
from shared.request.sampling_params import SamplingParams
from shared.trace.run_result import RunResult
from shared.trace.trace import Trace, TraceHeader
from shared.workload.sharegpt import ShareGPTLike
from shared.workload.workload import Workload, WorkloadRequest
from sim.cost.base import CostModel
from sim.run.driver import drive_workload
from sim.run.replay import ReplayResult, replay
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import ReplayTokenSource

if TYPE_CHECKING:
    from exec.engine.engine import Engine

LATENCIES = ("ttft", "tpot", "e2e")
PERCENTILES = ("p50", "p90")
WARMUP_PROMPT_LEN, WARMUP_REQUESTS = 64, 4


FIDELITY_TRAFFIC = ShareGPTLike(40, prompt_median=128.0, output_median=48.0, sigma=0.6,
                                max_len=1024, name="fidelity")


@dataclass(frozen=True)
class FidelityWorkload:
    """The requests of every run: `traffic` at `rate` (Poisson), drawn from `seed`, sampled
    at `temperature` (as calibrated: CalibrationConfig.temperature), EOS ignored."""

    traffic: ShareGPTLike = FIDELITY_TRAFFIC
    rate: float = 2.0
    seed: int = 0
    temperature: float = 1.0

    def build(self, vocab_size: int) -> Workload:
        params = SamplingParams(temperature=self.temperature, ignore_eos=True)
        return dataclasses.replace(self.traffic, sampling_params=params).build(
            vocab_size=vocab_size, seed=self.seed, rate=self.rate)

    def to_dict(self) -> dict[str, Any]:
        """The record fidelity.json holds (flat, its keys in this order)."""
        t = self.traffic
        return {"num_requests": t.num_requests, "rate": self.rate,
                "prompt_median": t.prompt_median, "output_median": t.output_median,
                "sigma": t.sigma, "max_len": t.max_len, "seed": self.seed,
                "temperature": self.temperature}


class RunFidelity(NamedTuple):
    """One run: the real and simulated results, the replay and the figures (`errors`)."""

    real: RunResult
    sim: RunResult
    replay: ReplayResult
    errors: dict[str, float]


def run_fidelity(engine: Engine, cost_for_run: Callable[[int], CostModel],
                 spec: FidelityWorkload, runs: int, progress=print) -> list[RunFidelity]:
    """`cost_for_run(k)` is run k's cost model, asked for just before the run."""
    out = []
    for k in range(runs):
        cost_model = cost_for_run(k)
        progress(f"run {k + 1}/{runs}: warm-up, then {spec.traffic.num_requests} requests at "
                 f"{spec.rate}/s in wall-clock time")
        warm_up(engine)
        engine.reset()
        real = engine.run(spec.build(engine.model_info.vocab_size))
        out.append(compare(real, cost_model))
    return out


def warm_up(engine: Engine) -> None:
    rng = np.random.default_rng(1234)
    prompts = [rng.integers(0, engine.model_info.vocab_size, WARMUP_PROMPT_LEN).tolist()
               for _ in range(WARMUP_REQUESTS)]
    engine.generate(prompts, {"max_new_tokens": 8, "ignore_eos": True})


def compare(real: RunResult, cost_model: CostModel) -> RunFidelity:
    sim = simulate_like(real.trace, cost_model)
    replayed = replay(real.trace, cost_model)
    errors = {"teacher_forced_median_ape": replayed.median_ape,
              "teacher_forced_mape": replayed.mape,
              "teacher_forced_agree_fraction": replayed.agree_fraction,
              "free_running_batch_agree_fraction": batch_agreement(real.trace, sim.trace)}
    for name in LATENCIES:
        for p in PERCENTILES:
            key = f"{name}_{p}"
            errors[f"{key}_error"] = relative_error(sim.summary[key], real.summary[key])
    return RunFidelity(real, sim, replayed, errors)


def simulate_like(trace: Trace, cost_model: CostModel) -> RunResult:
    """The recorded workload again in the simulator: the trace's effective EngineConfig and
    ModelInfo, its requests (arrival, prompt, parameters) and its tokens."""
    header = TraceHeader(trace.model_config, {"kind": "sim", "cost_model": type(cost_model).__name__})
    scheduler = Scheduler(trace.engine_config, trace.model_info, header=header)
    source = ReplayTokenSource(trace)
    runner = SimModelRunner(cost_model, source, scheduler.config, trace.model_info)
    drive_workload(scheduler, runner, workload_of(trace), finished_hook=source.finished)
    return RunResult.from_trace(scheduler.trace)


def workload_of(trace: Trace) -> Workload:
    """The trace's requests as a workload, arrivals measured from the first one."""
    recs = list(trace.requests.values())
    t0 = min(r.arrival_time for r in recs)
    return Workload(tuple(WorkloadRequest(r.rid, r.arrival_time - t0, r.input_ids, r.sampling_params)
                          for r in recs), name="recorded")


def batch_agreement(real: Trace, sim: Trace) -> float:
    """Fraction of real steps whose mode and request ids equal the sim step of that index."""
    a = real.step_fields("forward_mode", "rids")
    b = sim.step_fields("forward_mode", "rids")
    same = sum(x == y for x, y in zip(a, b, strict=False))
    return same / len(a) if a else math.nan


def relative_error(predicted: float, measured: float) -> float:
    """|predicted - measured| / measured (NaN when measured is 0 or NaN)."""
    return abs(predicted - measured) / measured if measured else math.nan


def medians(runs: list[RunFidelity]) -> dict[str, float]:
    keys = runs[0].errors
    return {k: float(np.nanmedian([r.errors[k] for r in runs])) for k in keys}


def latency_table(runs: list[RunFidelity]) -> list[dict[str, Any]]:
    """Per run and latency percentile: real seconds, simulated seconds, relative error."""
    rows = []
    for i, r in enumerate(runs):
        for name in LATENCIES:
            for p in PERCENTILES:
                key = f"{name}_{p}"
                rows.append({"run": i, "metric": key, "real_s": r.real.summary[key],
                             "sim_s": r.sim.summary[key], "error": r.errors[f"{key}_error"]})
    return rows
