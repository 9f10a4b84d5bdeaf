"""The SimPy driver: arrivals, the engine loop and its clock, with any ModelRunner."""

import dataclasses
import gc
import math

import pytest

from shared import (
    EngineConfig,
    FinishReason,
    ModelInfo,
    Scheduler,
    ShareGPTLike,
    Synthetic,
    Workload,
)
from sim.cost.base import ZeroCostModel
from sim.cost.batch_shape import BatchShape
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.build import build_simulation
from sim.run.driver import drive_workload
from tests.scripted_runner import ScriptedRunner

VOCAB = 1000
MODEL = ModelInfo(vocab_size=VOCAB, eos_token_ids=(0,), context_length=4096)
CLOCK = RooflineCostModel(get_model_shape("smollm2-135m"), get_hardware("h100"))


def _scheduler(**engine_args):
    return Scheduler(EngineConfig(**engine_args), MODEL, kv_capacity=8192)


def _workload(n=12, rate=50.0, burstiness=1.0, seed=0, prompt=48, output=6):
    return Synthetic(n, prompt, output).build(vocab_size=VOCAB, seed=seed, rate=rate,
                                              burstiness=burstiness)


def _end(step):
    return step.start_time + step.duration


def test_step_durations_are_the_clock_prices_and_starts_the_simpy_time():
    """Under a cost-model clock each step lasts its price and starts when the last one ended
    (or at an arrival, after an idle gap)."""
    workload = _workload()
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=CLOCK)
    arrivals = {r.arrival_time for r in workload}
    prev_end = 0.0
    for step in trace.steps:
        # NOTE: the scheduler records duration = end - start, exact up to rounding.
        price = CLOCK.step_time(BatchShape.from_step_record(step), trace.engine_config.overlap)
        assert step.duration == pytest.approx(price, rel=1e-9)
        assert step.start_time == pytest.approx(prev_end, rel=1e-12) or (
            step.start_time > prev_end and step.start_time in arrivals)
        prev_end = _end(step)


def test_no_request_is_scheduled_before_it_arrives():
    """Every step starts at or after the arrival of each request it holds."""
    workload = _workload(n=20, rate=200.0)
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=CLOCK)
    arrival = {r.rid: r.arrival_time for r in workload}
    for step in trace.steps:
        assert all(arrival[rid] <= step.start_time for rid in step.rids)


def test_idle_gaps_jump_to_the_next_arrival():
    """With arrivals far apart the engine idles, and its next step starts exactly at the next
    arrival."""
    workload = _workload(n=5, rate=0.5, burstiness=math.inf)  # one request every 2 s
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=CLOCK)
    first_steps = {}
    for step in trace.steps:
        for rid in step.rids:
            first_steps.setdefault(rid, step)
    for r in workload:
        assert first_steps[r.rid].start_time == r.arrival_time


def test_every_request_finishes_with_its_output_length_and_kv_returns():
    """Conservation under KV pressure (retractions): each request gets exactly its output
    length, and the KV pool and request rows are all free at the end."""
    workload = Synthetic(16, 64, 100).build(vocab_size=49152, seed=1)
    sim = build_simulation(model="smollm2-135m", max_total_tokens=700, chunked_prefill_size=128)
    trace = drive_workload(sim.scheduler, sim.runner, workload)
    assert sum(r.num_retractions for r in trace.requests.values()) > 0
    for w in workload:
        rec = trace.requests[w.rid]
        assert rec.finish_reason == FinishReason.by_length(w.sampling_params.max_new_tokens)
        assert rec.output_len == len(rec.output_ids) == w.sampling_params.max_new_tokens
    sim.scheduler.mem.check_idle()
    assert not sim.scheduler.has_work()


def test_runner_duration_is_the_clock_when_none_is_given():
    """Without a clock the step time is the runner's own `duration`."""
    class TimedRunner(ScriptedRunner):
        def forward(self, fb):
            return dataclasses.replace(super().forward(fb), duration=0.25)

    trace = drive_workload(_scheduler(), TimedRunner(VOCAB), _workload(n=3, rate=math.inf))
    assert {s.duration for s in trace.steps} == {0.25}
    assert [s.start_time for s in trace.steps] == [0.25 * i for i in range(len(trace.steps))]
    assert len(trace.steps) > 1


def test_runner_without_duration_or_clock_is_refused():
    """A runner that reports no duration needs a clock: a clear ValueError otherwise."""
    with pytest.raises(ValueError, match="no step duration"):
        drive_workload(_scheduler(), ScriptedRunner(VOCAB), _workload(n=2))


def test_zero_cost_clock_runs_every_step_at_the_arrival_time():
    """With the null cost model simulated time only moves at arrivals."""
    workload = _workload(n=4, rate=10.0)
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=ZeroCostModel())
    arrivals = {r.arrival_time for r in workload}
    assert all(s.duration == 0 and s.start_time in arrivals for s in trace.steps)


def test_finished_hook_ends_requests_early():
    """A finished hook (e.g. a stop string) ends a request after the token it names."""
    stop = FinishReason.by_stop("\n\n")

    def hook(batch, ids):
        return {r.rid: stop for r in batch.reqs if r.rid == "r1" and len(r.output_ids) + 1 == 3}

    workload = _workload(n=3, rate=math.inf, output=8)
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=CLOCK,
                           finished_hook=hook)
    assert trace.requests["r1"].finish_reason == stop
    assert trace.requests["r1"].output_len == 3
    assert trace.requests["r0"].output_len == 8


def test_empty_workload_is_refused():
    """An empty workload raises a clear ValueError."""
    with pytest.raises(ValueError, match="no requests"):
        drive_workload(_scheduler(), ScriptedRunner(VOCAB), Workload(()), clock=CLOCK)


def test_requests_at_the_same_time_are_admitted_in_workload_order():
    """Ties in arrival time keep workload order (rids r0, r1, ... with rate=inf)."""
    workload = _workload(n=6, rate=math.inf)
    trace = drive_workload(_scheduler(), ScriptedRunner(VOCAB), workload, clock=CLOCK)
    assert list(trace.requests) == [r.rid for r in workload]
    assert trace.steps[0].rids == tuple(r.rid for r in workload)


def test_a_simulation_leaves_no_reference_cycles():
    """The driver pauses the cyclic collector for a run (sim.run.driver.cyclic_gc_paused); that
    holds memory flat only because a run, with retractions, chunking and prefix sharing,
    makes no cyclic garbage. The collector's previous state is restored."""
    workload = ShareGPTLike(200).build(vocab_size=49152, seed=3, rate=40.0)
    sim = build_simulation(model="smollm2-135m", max_total_tokens=6000, chunked_prefill_size=256)
    gc.collect()
    gc.disable()
    try:
        drive_workload(sim.scheduler, sim.runner, workload, finished_hook=sim.token_source.finished)
        assert not gc.isenabled()
        cyclic = gc.collect()
    finally:
        gc.enable()
    assert sum(r.num_retractions for r in sim.scheduler.trace.requests.values()) > 0
    assert cyclic < 100, f"{cyclic} objects in reference cycles after one simulation"
    drive_workload(_scheduler(), ScriptedRunner(VOCAB), _workload(), clock=CLOCK)
    assert gc.isenabled()


def test_a_run_leaves_what_the_caller_froze_frozen():
    """The run's end hands its objects to the oldest generation without thawing the
    caller's frozen ones, and the collector is on again."""
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        drive_workload(_scheduler(), ScriptedRunner(VOCAB), _workload(), clock=CLOCK)
        assert gc.get_freeze_count() > frozen // 2 and gc.isenabled()  # not thawed (0)
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("disable_overlap", [False, True])
def test_an_arrival_during_a_step_runs_one_step_later_under_overlap(disable_overlap):
    """A request arriving while step N runs is first scheduled in step N + 1, or under the
    overlap schedule in step N + 2 (SGLang's loop schedules N + 1 as N launches); one
    reaching an idle engine runs at once."""
    from shared import SamplingParams, WorkloadRequest

    params = SamplingParams(max_new_tokens=40, ignore_eos=True)
    first = WorkloadRequest("a", 0.0, tuple(range(1, 33)), params)
    probe = drive_workload(_scheduler(disable_overlap_schedule=disable_overlap),
                           ScriptedRunner(VOCAB), Workload((first,)), clock=CLOCK)
    mid = probe.steps[10].start_time + probe.steps[10].duration / 2   # inside step 10
    late = WorkloadRequest("b", mid, tuple(range(40, 72)), params)
    trace = drive_workload(_scheduler(disable_overlap_schedule=disable_overlap),
                           ScriptedRunner(VOCAB), Workload((first, late)), clock=CLOCK)
    assert trace.steps[0].start_time == 0.0 and trace.steps[0].rids == ("a",)
    ran = next(s for s in trace.steps if "b" in s.rids)
    during = next(s for s in trace.steps if s.start_time < mid < _end(s))
    assert during.step == 10 and ran.step == during.step + 1 + (not disable_overlap)
